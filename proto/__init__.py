"""The public gRPC protocol (`sqltopic.proto`) and its generated Python stubs."""
