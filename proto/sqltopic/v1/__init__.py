"""`sqltopic.v1`: the generated messages (`sqltopic_pb2`) and stubs (`sqltopic_pb2_grpc`)."""
