"""The gRPC wing of the runtime: framing, auth and the driver side (`client`).

The service side is a host: `simharness.hosts.grpc_service`.
"""
