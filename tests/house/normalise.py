#!/usr/bin/env python3
"""normalise.py — placeholders for what differs between two runs of one story.

  normalise.py FILE DIR OLD_VERSION NEW_VERSION      (text, JSON or a database)

Used by same_outputs.sh. What is replaced: the story's directory, the two
binaries' code versions, timestamps and dates, process ids, and every number
that measures time or speed (throughput, wall/forward seconds, GFLOP/s, the
harness overhead, the feed's random id). Everything else is printed as it is.
"""
import json, re, sqlite3, sys

VOLATILE = re.compile(r"pid|(^|_)s$|_s\b|wall|forward_s|tokens_per_s|tok/s|tokens/s|throughput|gflops|"
                      r"overhead|seconds|duration|elapsed|started|finished|_at$|_at\b|time|feed_id|"
                      r"b_over_a|b_minus_a|ratio|peak|bytes_per_s|latency", re.I)
NUM = re.compile(r"-?[0-9]+(\.[0-9]+)?(e\\?[-+]?[0-9]+)?")

def text(s, d, versions):
    s = s.replace(d, "DIR")
    for v in versions:
        if v: s = s.replace(v, "VERSION")
    s = re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?", "TIME", s)
    s = re.sub(r"(reopened-)\d{8}", r"\1DATE", s)
    s = re.sub(r"dirty=[01]", "dirty=X", s)
    s = re.sub(r"urn:vtlab:feed:[0-9a-f]+", "urn:vtlab:feed:FEED", s)
    return s

def walk(x, volatile_row=False):
    if isinstance(x, dict):
        name = str(x.get("name", x.get("metric", "")))
        row = bool(VOLATILE.search(name))
        return {k: ("N" if (VOLATILE.search(k) or (row and k in ("value", "a", "b", "mean", "median")))
                    and isinstance(v, (int, float)) else walk(v, row)) for k, v in x.items()}
    if isinstance(x, list):
        return [walk(v) for v in x]
    return x

def line(l):
    return re.sub(r" +", " ", NUM.sub("N", l)) if VOLATILE.search(l) else l

def main():
    path, d, versions = sys.argv[1], sys.argv[2], sys.argv[3:]
    raw = open(path, "rb").read()
    if raw.startswith(b"SQLite format 3"):
        db = sqlite3.connect(path)
        for (t,) in db.execute("select name from sqlite_master where type='table' order by name"):
            cur = db.execute(f'select * from "{t}" order by 1')
            cols = [c[0] for c in cur.description]
            print(f"== {t}: {'|'.join(cols)}")
            for r in cur:
                named = dict(zip(cols, r))
                vol_row = any(VOLATILE.search(str(named.get(k, ""))) for k in ("name", "metric", "key"))
                out = []
                for c, v in zip(cols, r):
                    if v is not None and (VOLATILE.search(c) or c == "host" or (vol_row and c in ("value", "a", "b"))):
                        v = "N"
                    out.append(text(str(v), d, versions))
                print(line("|".join(out)) if t in ("nightly_findings", "nightlies") else "|".join(out))
        return
    s = raw.decode("utf-8", "replace")
    body, _, status = s.rpartition("exit ")
    try:
        j = json.loads(body)
        print(text(json.dumps(walk(j), indent=1, sort_keys=False), d, versions))
        print("exit " + status.strip())
        return
    except ValueError:
        pass
    for l in text(s, d, versions).split("\n"):
        print(line(l))

if __name__ == "__main__":
    main()
