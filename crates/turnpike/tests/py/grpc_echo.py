"""gRPC server and client (python `grpcio`) for the gateway tests.

  grpc_echo.py server          serves Echo on an insecure (h2c) port; prints the port, then serves
  grpc_echo.py client TARGET [KEY]
                               calls Say, Count and Fail through TARGET ("127.0.0.1:port") and
                               prints one JSON line with what came back.
  grpc_echo.py status TARGET METHOD [KEY]
                               calls one method and prints {"code": ..., "details": ...}

With TP_GRPC_CA set to a CA file, the client side uses TLS (server name "localhost").
Stubs are generated from echo.proto (beside this file) at start with grpc_tools.protoc.
"""
import importlib
import json
import os
import sys
import tempfile
from concurrent import futures

import grpc
from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = tempfile.mkdtemp(prefix="turnpike-grpc-")
rc = protoc.main(["protoc", f"-I{HERE}", f"--python_out={OUT}", f"--grpc_python_out={OUT}",
                  os.path.join(HERE, "echo.proto")])
if rc != 0:
    sys.exit(f"protoc failed: {rc}")
sys.path.insert(0, OUT)
pb = importlib.import_module("echo_pb2")
pb_grpc = importlib.import_module("echo_pb2_grpc")


class Echo(pb_grpc.EchoServicer):
    def Say(self, request, context):
        key = dict(context.invocation_metadata()).get("x-api-key", "")
        context.set_trailing_metadata((("x-served-by", "python"),))
        return pb.Message(text="echo: " + request.text + (" key=" + key if key else ""))

    def Count(self, request, context):
        for i in range(request.n):
            yield pb.Message(text=str(i))

    def Fail(self, request, context):
        context.abort(grpc.StatusCode.NOT_FOUND, "no such thing: " + request.text)


def server():
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_EchoServicer_to_server(Echo(), s)
    port = s.add_insecure_port("127.0.0.1:0")
    s.start()
    print(port, flush=True)
    s.wait_for_termination()


def channel(target):
    ca = os.environ.get("TP_GRPC_CA")
    if not ca:
        return grpc.insecure_channel(target)
    with open(ca, "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    return grpc.secure_channel(target, creds, options=(("grpc.ssl_target_name_override", "localhost"),))


def metadata(key):
    # "k" is sent as x-api-key, "limit:<v>" as x-limit-key.
    if not key:
        return ()
    if key.startswith("limit:"):
        return (("x-limit-key", key[len("limit:"):]),)
    return (("x-api-key", key),)


def client(target, key):
    with channel(target) as ch:
        stub = pb_grpc.EchoStub(ch)
        reply, call = stub.Say.with_call(pb.Message(text="hi"), metadata=metadata(key), timeout=10)
        trailers = dict(call.trailing_metadata())
        stream = [m.text for m in stub.Count(pb.CountRequest(n=5), metadata=metadata(key), timeout=10)]
        try:
            stub.Fail(pb.Message(text="x"), metadata=metadata(key), timeout=10)
            fail = None
        except grpc.RpcError as e:
            fail = {"code": e.code().name, "details": e.details()}
        print(json.dumps({"say": reply.text, "trailers": trailers, "stream": stream, "fail": fail}), flush=True)


def status(target, method, key):
    with channel(target) as ch:
        stub = pb_grpc.EchoStub(ch)
        try:
            getattr(stub, method)(pb.Message(text="x"), metadata=metadata(key), timeout=10)
            print(json.dumps({"code": "OK", "details": ""}), flush=True)
        except grpc.RpcError as e:
            print(json.dumps({"code": e.code().name, "details": e.details()}), flush=True)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "server":
        server()
    elif cmd == "client":
        client(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
    elif cmd == "status":
        status(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "")
