"""The server: catalog, embedded engine, mnode (membership, rebalance), vnodes (WAL,
topic evaluation, offsets) and the gRPC services. Uses `wal`, `sql` and `proto`."""
