#!/usr/bin/env python3
"""Rewrites `Error.x-error-codes` of schema/openapi/v1.json from core/src/error.rs's table (the
test `r_cp_19_the_openapi_document_lists_every_error_code` fails until this is run after a code
is added). Usage: python3 schema/openapi/error_codes.py"""
import json, pathlib, re

root = pathlib.Path(__file__).resolve().parents[2]
source = (root / "core/src/error.rs").read_text()
table = source[source.index("error_codes! {"):]
table = table[: table.index("\n}\n")]
entry = re.compile(r"((?:\s*///[^\n]*\n)+)\s*(\w+) = \"(\w+)\", (\d+), (\w+);")
grpc = lambda name: re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()
codes = {}
for docs, _variant, wire, status, code in entry.findall(table):
    meaning = " ".join(l.strip()[3:].strip() for l in docs.strip().splitlines())
    if wire in codes:  # a second variant of one wire code: the status when it happens
        codes[wire]["http_status_when_it_happens"] = int(status)
        codes[wire]["meaning"] += " " + meaning
        continue
    codes[wire] = {"http_status": int(status), "grpc_code": grpc(code), "meaning": meaning}
doc_path = root / "schema/openapi/v1.json"
doc = json.loads(doc_path.read_text())
doc["components"]["schemas"]["Error"]["x-error-codes"] = codes
doc_path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
print(f"{len(codes)} codes")
