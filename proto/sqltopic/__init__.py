"""Protocol buffers of package `sqltopic` (mirrors the proto package path)."""
