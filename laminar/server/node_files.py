"""The node's own files in its data directory: who it is and what it founded.

- ``node.json``: :class:`Identity` (node id, cluster id, weight, zone), written
  on the first start and whenever one of them changes (JSON, replaced durably).
- ``founded``: the founded offset (ASCII decimal, replaced durably): every topic
  creation below this metadata offset has had its founding replicas created here
  (see :meth:`laminar.server.catalogue.CatalogueApplier.apply_change`).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass

from laminar.errors import ConfigError
from laminar.segment.layout import founded_path, node_path, replace_file
from laminar.server.config import NodeConfig


def read_founded(data_dir: str) -> int:
    """The node's founded offset: every topic creation below this metadata offset has
    had its founding replicas created here, so replaying it after a restart must not
    found them again (see
    :meth:`~laminar.server.catalogue.CatalogueApplier.apply_change`)."""
    path = founded_path(data_dir)
    try:
        with open(path, encoding="ascii") as file:
            return int(file.read().strip() or 0)
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None


def write_founded(data_dir: str, offset: int) -> None:
    """Replace the founded offset durably (after the replicas it covers are)."""
    replace_file(founded_path(data_dir), str(offset).encode("ascii"))


@dataclass
class Identity:
    node_id: str
    cluster_id: str | None
    weight: float
    zone: str

    @classmethod
    def load_or_create(cls, config: NodeConfig) -> Identity:
        path = node_path(config.data_dir)
        try:
            with open(path, encoding="utf-8") as file:
                saved = json.load(file)
            identity = cls(
                str(saved["node_id"]),
                saved.get("cluster_id"),
                float(saved.get("weight", 1.0)),
                str(saved.get("zone", "")),
            )
        except FileNotFoundError:
            node_id = config.node_id or f"n-{uuid.uuid4().hex[:10]}"
            identity = cls(node_id, None, 1.0, "")
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ConfigError(f"cannot read {path}: {error}") from None
        if config.weight is not None:
            identity.weight = config.weight
        if config.zone is not None:
            identity.zone = config.zone
        identity.save(config.data_dir)
        return identity

    def save(self, data_dir: str) -> None:
        os.makedirs(data_dir, exist_ok=True)
        saved = {
            "node_id": self.node_id,
            "cluster_id": self.cluster_id,
            "weight": self.weight,
            "zone": self.zone,
        }
        replace_file(node_path(data_dir), json.dumps(saved).encode("utf-8"))
