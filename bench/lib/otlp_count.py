"""An OTLP/gRPC trace receiver for the benches: serves
opentelemetry.proto.collector.trace.v1.TraceService/Export on 127.0.0.1:PORT and keeps only
the number of spans received, rewritten to COUNT_FILE once a second. The tests' receiver
(crates/warden-proxy/tests/fixtures/tracing/otlp_receiver.py) writes every span as a JSON
line, about 40 us of Python per span: at 1% of a gateway's requests that is a few percent of
the core wrk runs on (the receiver runs beside the load, not beside the proxy), charged to
the proxy's throughput. Here a span costs its share of one protobuf parse.

usage: otlp_count.py PORT COUNT_FILE
"""

import sys
import threading
import time
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts

LOCK = threading.Lock()
COUNT = [0]


def main():
    port, count_file = int(sys.argv[1]), sys.argv[2]

    def export(request, context):
        n = 0
        for rs in request.resource_spans:
            scopes = rs.scope_spans if hasattr(rs, "scope_spans") else rs.instrumentation_library_spans
            for ss in scopes:
                n += len(ss.spans)
        with LOCK:
            COUNT[0] += n
        return ts.ExportTraceServiceResponse()

    handler = grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService",
        {
            "Export": grpc.unary_unary_rpc_method_handler(
                export,
                request_deserializer=ts.ExportTraceServiceRequest.FromString,
                response_serializer=ts.ExportTraceServiceResponse.SerializeToString,
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    written = -1
    while True:
        time.sleep(1)
        with LOCK:
            n = COUNT[0]
        if n != written:
            with open(count_file, "w") as f:
                f.write(f"{n}\n")
            written = n


if __name__ == "__main__":
    main()
