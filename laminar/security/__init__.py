"""Security: TLS material, gossip keys, principals, ACLs and the audit log."""
