#!/usr/bin/python3
"""tap.py LOG CMD... - runs CMD as an engine and passes the protocol through unchanged, logging
the shape of every forward request vtlab writes: one line "SEQUENCES TOKENS" per request to LOG.
It shows what vtlab sent (tests/cli/test_engine_batch.sh: batches to an engine that declares
max_batch, one sequence per request otherwise) without touching the engine in between.
Its exit status is the engine's: when the engine's stdout ends, the tap ends with it (as the
engine it stands for), so vtlab sees a crash at once."""
import json
import os
import subprocess
import sys
import threading


def pump_out(p, dst):
    for chunk in iter(lambda: p.stdout.read1(1 << 16), b""):
        dst.write(chunk)
        dst.flush()
    rc = p.wait()
    os._exit(rc if rc >= 0 else 128 - rc)


def main():
    log, argv = sys.argv[1], sys.argv[2:]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    t = threading.Thread(target=pump_out, args=(p, sys.stdout.buffer), daemon=True)
    t.start()
    fin = sys.stdin.buffer
    with open(log, "a") as lf:
        while True:
            line = fin.readline()
            if not line:
                break
            n = 0
            try:
                h = json.loads(line)
                n = int(h.get("payload_bytes", 0))
                if h.get("type") == "forward":
                    seqs = h.get("sequences")
                    lf.write("%d %d\n" % (len(seqs) if isinstance(seqs, list) else 1, h.get("tokens", 0)))
                    lf.flush()
            except (ValueError, TypeError, AttributeError):
                pass
            try:
                p.stdin.write(line + fin.read(n))
                p.stdin.flush()
            except BrokenPipeError:
                break
    try:
        p.stdin.close()
    except BrokenPipeError:
        pass
    t.join()
    return p.wait()


if __name__ == "__main__":
    sys.exit(main())
