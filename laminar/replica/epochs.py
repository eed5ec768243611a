"""Term epochs of a log: where each term's entries start (Kafka's leader-epoch cache).

Terms never decrease along a log, so the whole term history is a short list of
``(term, start_offset)`` pairs, one per term that wrote entries. It answers
"which term wrote offset o" and "where does term t end" without touching storage.
"""

from __future__ import annotations

from bisect import bisect_right

from laminar.segment.storage import LogStorage


class Epochs:
    """``(term, start_offset)`` pairs of a log starting at ``start_offset``.

    ``start_term`` is the term of the entry just before ``start_offset`` (-1 when
    the log starts at its beginning), which log matching needs at the boundary.
    """

    __slots__ = ("_starts", "_terms", "start_offset", "start_term")

    def __init__(self, start_offset: int = 0, start_term: int = -1) -> None:
        self.start_offset = start_offset
        self.start_term = start_term
        self._terms: list[int] = []
        self._starts: list[int] = []

    @classmethod
    def from_storage(cls, storage: LogStorage, start_term: int = -1) -> Epochs:
        """Find each term's first offset by binary search over ``term_at``.

        Gaps left by keyed compaction change nothing: ``term_at`` answers the term
        of the batch before a gap, which is the removed records' term (a term starts
        with a batch that is never removed), and -1 in a gap at the log start, whose
        records had ``start_term``. So a compacted log gives the same epochs as the
        log it was compacted from."""
        epochs = cls(storage.start_offset, start_term)
        offset, end = storage.start_offset, storage.end_offset
        while offset < end:
            term = storage.term_at(offset)
            low, high = offset, end  # term_at(low) == term; high: first later term or end
            while high - low > 1:
                middle = (low + high) // 2
                if storage.term_at(middle) == term:
                    low = middle
                else:
                    high = middle
            recorded = term if term >= 0 else start_term  # -1: a gap at the log start
            if recorded >= 0:
                epochs.note_append(recorded, offset)
            offset = high
        return epochs

    @property
    def last_term(self) -> int:
        return self._terms[-1] if self._terms else self.start_term

    def note_append(self, term: int, base_offset: int) -> None:
        """Record that a batch of ``term`` was appended at ``base_offset``."""
        if self._terms and self._terms[-1] == term:
            return
        assert term >= self.last_term, f"term went backward: {term} < {self.last_term}"
        assert not self._starts or base_offset > self._starts[-1]
        self._terms.append(term)
        self._starts.append(base_offset)

    def term_at(self, offset: int) -> int:
        """Term of the entry at ``offset`` (``start_term`` just below the start)."""
        index = bisect_right(self._starts, offset) - 1
        if index < 0:
            return self.start_term
        return self._terms[index]

    def start_of(self, term: int) -> int:
        """First offset written in ``term``; -1 when no entry has that term."""
        for index, known in enumerate(self._terms):
            if known == term:
                return self._starts[index]
        return -1

    def end_of(self, term: int, end_offset: int) -> int:
        """The offset after the last entry with a term <= ``term``, or -1 if none."""
        index = bisect_right(self._terms, term) - 1
        if index < 0:
            return -1 if term < self.start_term or self.start_term < 0 else self.start_offset
        if index + 1 < len(self._starts):
            return self._starts[index + 1]
        return end_offset

    def truncate(self, offset: int) -> None:
        """Forget terms whose entries all lie at or after ``offset``."""
        index = bisect_right(self._starts, offset - 1)
        del self._terms[index:]
        del self._starts[index:]

    def drop_before(self, offset: int, end_offset: int) -> None:
        """The log now starts at ``offset`` (retention deleted what was below it)."""
        if offset <= self.start_offset:
            return
        start_term = self.term_at(offset - 1)
        index = bisect_right(self._starts, offset) - 1  # the epoch holding ``offset``
        if offset >= end_offset:
            index = len(self._starts)  # nothing left
        if index > 0:
            del self._terms[:index]
            del self._starts[:index]
        if self._starts and self._starts[0] < offset:
            self._starts[0] = offset
        self.start_offset = offset
        self.start_term = start_term

    def reset(self, start_offset: int, start_term: int) -> None:
        self.start_offset = start_offset
        self.start_term = start_term
        self._terms.clear()
        self._starts.clear()

    def as_list(self) -> list[tuple[int, int]]:
        return list(zip(self._terms, self._starts, strict=True))
