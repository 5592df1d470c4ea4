"""What the tests of every tier share: real clusters (pgcluster), a shared lease store and the
servers that use it (fleet), clients that generate and record ids (clients), and the readings of
leases (leases), of named generators (generators) and of the fault tier's fleet (faults)."""
