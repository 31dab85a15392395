"""Plain chunked gRPC streaming, the baseline of the remote benchmarks (no simharness inside).

A server whose one bidi method echoes every message it receives (raw bytes,
no protobuf), in a process of its own like an executor service. It prints
its port, then serves until stdin closes.
"""

import sys
from concurrent import futures

import grpc

METHOD = '/bench.Echo/Stream'


def main() -> None:
    opts = [('grpc.max_send_message_length', 4 << 20), ('grpc.max_receive_message_length', 4 << 20)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=opts)
    handler = grpc.stream_stream_rpc_method_handler(lambda it, ctx: it)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler('bench.Echo', {'Stream': handler}),)
    )
    port = server.add_insecure_port('127.0.0.1:0')
    server.start()
    print(port, flush=True)
    sys.stdin.read()
    server.stop(1).wait(5)


if __name__ == '__main__':
    main()
