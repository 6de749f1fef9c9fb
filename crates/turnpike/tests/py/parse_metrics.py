"""Parses a metrics exposition read from stdin with the prometheus_client parsers and prints
its samples as JSON: [{"name", "labels", "value", "exemplar"}]. Argument: `text` (Prometheus
0.0.4) or `openmetrics`. Fails (exit 1) when the text does not parse."""
import json
import sys

fmt = sys.argv[1]
text = sys.stdin.read()
if fmt == "openmetrics":
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
else:
    from prometheus_client.parser import text_string_to_metric_families

out = []
for family in text_string_to_metric_families(text):
    for s in family.samples:
        ex = None
        if getattr(s, "exemplar", None):
            ex = {"labels": dict(s.exemplar.labels), "value": s.exemplar.value}
        out.append({"family": family.name, "type": family.type, "name": s.name,
                    "labels": dict(s.labels), "value": s.value, "exemplar": ex})
print(json.dumps(out))
