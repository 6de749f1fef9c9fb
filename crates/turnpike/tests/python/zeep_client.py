"""A real SOAP client (zeep) that talks to the gateway: reads the WSDL the gateway publishes at
`?wsdl`, then calls operations through it. Prints one JSON object per call."""
import json
import sys

import zeep
from zeep.exceptions import Fault

wsdl = sys.argv[1]
client = zeep.Client(wsdl)
out = {"address": client.service._binding_options["address"]}

city = client.service.getCity("Berlin")
out["getCity"] = {"name": city.name, "country": city.country, "population": city.population}
out["listCities"] = list(client.service.listCities(2))

for key, call in [
    ("tooLong", lambda: client.service.getCity("x" * 30)),
    ("outOfRange", lambda: client.service.listCities(1000)),
    ("backendFault", lambda: client.service.getCity("Atlantis")),
]:
    try:
        call()
        out[key] = None
    except Fault as f:
        out[key] = {"message": f.message, "code": str(f.code), "detail": None if f.detail is None else "".join(f.detail.itertext())}

print(json.dumps(out), flush=True)
