"""Reliability under hostile conditions: chaos (faults in a cluster), fuzz (parsers of untrusted bytes), abuse
(hostile sockets)."""
