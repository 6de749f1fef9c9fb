"""An OTLP/gRPC trace collector for the tests: prints its port, then one JSON line per span it
receives ({"trace_id", "span_id", "parent", "name", "kind", "service"}), flushed at once.
With arguments CERT KEY CA it serves TLS and requires a client certificate signed by CA."""
import json
import sys
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        for rs in request.resource_spans:
            service = ""
            for a in rs.resource.attributes:
                if a.key == "service.name":
                    service = a.value.string_value
            for ss in rs.scope_spans:
                for s in ss.spans:
                    print(json.dumps({
                        "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                        "parent": s.parent_span_id.hex(), "name": s.name, "kind": s.kind,
                        "service": service,
                    }), flush=True)
        return trace_service_pb2.ExportTraceServiceResponse()


server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Collector(), server)
if len(sys.argv) == 4:
    cert, key, ca = (open(f, "rb").read() for f in sys.argv[1:4])
    credentials = grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=True)
    port = server.add_secure_port("127.0.0.1:0", credentials)
else:
    port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
server.wait_for_termination()
