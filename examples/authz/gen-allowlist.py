#!/usr/bin/env python3
"""Write large IP allowlists in the shapes seed 001 measured, for warden, nginx and HAProxy.

  gen-allowlist.py --count 100000 -o allow-100k.yaml                 # one rule, 100k ipBlocks
  gen-allowlist.py --count 20000 --rule-per-ip -o allow-20k-rules.yaml # 20k rules of one IP
  gen-allowlist.py --count 1000000 --mixed -o allow-1m.yaml          # 1M CIDRs, 1/4 IPv6
  gen-allowlist.py --count 100000 --format nginx -o allow.geo        # nginx `geo` include
  gen-allowlist.py --count 100000 --format haproxy -o allow.lst      # HAProxy `src -f` file

Addresses are in the seed's style (x.y.z.1: 0.0.0.1, 0.0.1.1, ...), never 127.0.0.0/8, so a client on
127.0.0.1 is searched against the whole list and denied. `--include` adds addresses (default
127.0.0.2, the demo's allowed client). The output is deterministic; do not commit it.
"""
import argparse
import sys


def addresses(count, mixed):
    """Yield `count` distinct entries; with --mixed every 4th is IPv6 and every 8th a prefix."""
    i = 0
    produced = 0
    while produced < count:
        a, b, c = (i >> 16) & 0xFF, (i >> 8) & 0xFF, i & 0xFF
        hi = i >> 24
        i += 1
        if mixed and produced % 4 == 3:
            # 2001:db8:<i>::1 and, every 8th entry, a /64 network.
            entry = f"2001:db8:{(i >> 16) & 0xFFFF:x}:{i & 0xFFFF:x}::"
            entry += "/64" if produced % 8 == 7 else "1"
        else:
            first = (a + hi * 3) % 224  # stay below multicast
            if first == 127:
                continue
            entry = f"{first}.{b}.{c}.1"
            if mixed and produced % 8 == 5:
                entry = f"{first}.{b}.{c}.0/24"
        produced += 1
        yield entry


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, required=True, help="number of generated entries")
    p.add_argument("--mixed", action="store_true", help="1/4 IPv6 and some /24 and /64 prefixes")
    p.add_argument("--rule-per-ip", action="store_true", help="one rule per entry (seed step 5)")
    p.add_argument("--include", action="append", default=None,
                   help="extra allowed address (repeatable; default 127.0.0.2, 'none' for none)")
    p.add_argument("--format", choices=["istio", "nginx", "haproxy"], default="istio")
    p.add_argument("--name", default="test", help="policy name (istio format)")
    p.add_argument("--namespace", default="istio-system")
    p.add_argument("-o", "--output", default="-")
    args = p.parse_args()

    extra = args.include if args.include is not None else ["127.0.0.2"]
    extra = [e for e in extra if e != "none"]
    entries = list(addresses(args.count, args.mixed)) + extra
    out = sys.stdout if args.output == "-" else open(args.output, "w")
    w = out.write
    if args.format == "nginx":
        for e in entries:
            w(f"{e} 1;\n")
    elif args.format == "haproxy":
        for e in entries:
            w(f"{e}\n")
    else:
        w("apiVersion: security.istio.io/v1beta1\nkind: AuthorizationPolicy\n")
        w(f"metadata:\n  name: {args.name}\n  namespace: {args.namespace}\n")
        w("spec:\n  action: ALLOW\n  selector:\n    matchLabels:\n      istio: ingressgateway\n  rules:\n")
        if args.rule_per_ip:
            for e in entries:
                w(f"  - from:\n    - source:\n        ipBlocks:\n        - \"{e}\"\n")
        else:
            w("  - from:\n    - source:\n        ipBlocks:\n")
            for e in entries:
                w(f"        - \"{e}\"\n")
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
