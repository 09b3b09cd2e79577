# Keys, JWKS and tokens for warden's JWT tests, made by PyJWT (with `cryptography`).
# usage: mint.py SPEC.json  -> prints a JSON object {"jwks": {...}, "tokens": {...}}
# SPEC: {"keys": {kid: {"alg": ALG, "pem": path | "secret": text}},
#        "jwks": {name: [kid, ...]},
#        "tokens": {name: {"kid": kid, "alg": ALG?, "claims": {...}, "secret": text?, "header": {...}?}}}
import json
import sys

import jwt
from jwt.algorithms import ECAlgorithm, HMACAlgorithm, OKPAlgorithm, RSAAlgorithm
from cryptography.hazmat.primitives.serialization import load_pem_private_key

spec = json.load(open(sys.argv[1]))
private = {}
public_jwk = {}
for kid, k in spec["keys"].items():
    alg = k["alg"]
    if "secret" in k:
        private[kid] = k["secret"].encode()
        jwk = json.loads(HMACAlgorithm.to_jwk(private[kid]))
    else:
        key = load_pem_private_key(open(k["pem"], "rb").read(), password=None)
        private[kid] = key
        family = {"RS": RSAAlgorithm, "PS": RSAAlgorithm, "ES": ECAlgorithm, "Ed": OKPAlgorithm}[alg[:2]]
        jwk = json.loads(family.to_jwk(key.public_key()))
    jwk["kid"] = kid
    jwk["alg"] = alg
    public_jwk[kid] = jwk

out = {"jwks": {}, "tokens": {}}
for name, kids in spec.get("jwks", {}).items():
    out["jwks"][name] = json.dumps({"keys": [public_jwk[k] for k in kids]})
for name, t in spec.get("tokens", {}).items():
    kid = t["kid"]
    alg = t.get("alg", spec["keys"][kid]["alg"])
    key = t["secret"].encode() if "secret" in t else private[kid]
    headers = {"kid": kid}
    headers.update(t.get("header", {}))
    if alg == "none":
        key = None
    out["tokens"][name] = jwt.encode(t["claims"], key, algorithm=alg, headers=headers)
print(json.dumps(out))
