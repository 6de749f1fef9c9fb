"""A real SOAP service (spyne, document/literal wrapped) for the gateway's SOAP tests: SOAP 1.1,
or SOAP 1.2 with the argument `1.2`.

Prints the port it listens on (127.0.0.1, chosen by the kernel), then serves until killed.
It does not validate requests itself, so that only the gateway's validation is tested.
"""
import sys
from wsgiref.simple_server import make_server, WSGIRequestHandler

from spyne import Application, ComplexModel, Fault, Integer, Iterable, ServiceBase, Unicode, rpc
from spyne.protocol.soap import Soap11, Soap12
from spyne.server.wsgi import WsgiApplication

TNS = "urn:turnpike:test:cities"


class City(ComplexModel):
    __namespace__ = TNS
    name = Unicode
    country = Unicode
    population = Integer


class CityService(ServiceBase):
    @rpc(Unicode(max_len=20, min_occurs=1, nillable=False), _returns=City)
    def getCity(ctx, name):
        if name == "Atlantis":
            raise Fault(faultcode="Client.NotFound", faultstring="no such city: Atlantis")
        return City(name=name, country="Germany", population=3645000)

    @rpc(Integer(ge=1, le=100), _returns=Iterable(Unicode))
    def listCities(ctx, limit):
        return ["Berlin", "Bonn", "Hamburg"][:limit]


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


protocol = Soap12 if sys.argv[1:] == ["1.2"] else Soap11
app = Application(
    [CityService], tns=TNS, in_protocol=protocol(), out_protocol=protocol()
)
server = make_server("127.0.0.1", 0, WsgiApplication(app), handler_class=Quiet)
print(server.server_port, flush=True)
server.serve_forever()
