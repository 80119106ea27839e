#!/usr/bin/env python3
"""report_layout.py CHECK index.html — what a reader of the report's page sees
(issue 33 item 5), checked in its HTML:

  links    every in-page link (href="#x") goes to a section the page has;
  code     a code cell (knobs, keys) breaks only after '_', '=', ',' or '/'
           (or at a space): its text is in nowrap pieces, each but the last
           ending in one of them, with a break opportunity (<wbr>) between,
           and nothing in the CSS lets a browser break inside a word;
  reasons  the summary's confound reasons are whole (nothing cut with an
           ellipsis: the reason says what to replay);
  all      the three.
Exit 0, or 1 with what is wrong.
"""
import html
import re
import sys


def links(page):
    ids = set(re.findall(r'id="([^"]+)"', page))
    bad = sorted(set(h for h in re.findall(r'href="#([^"]+)"', page) if h not in ids))
    return ["link to #%s, a section the page does not have" % h for h in bad]


def code(page):
    bad = []
    css = re.search(r"<style>(.*?)</style>", page, re.S)
    css = css.group(1) if css else ""
    if re.search(r"overflow-wrap:\s*anywhere|word-break:\s*break-all", css):
        bad.append("the CSS lets a browser break code inside a word (overflow-wrap:anywhere / word-break:break-all)")
    if ".nb{white-space:nowrap}" not in css.replace(" ", ""):
        bad.append("no nowrap class for the pieces of code cells")
    for cell in re.findall(r"<td[^>]*>\s*<code>(.*?)</code>", page, re.S):
        rest = re.sub(r'<span class="nb">[^<]*</span>|<wbr>|\s', "", cell)
        if rest:
            bad.append("code cell text outside a nowrap piece: %r" % html.unescape(rest)[:80])
            continue
        for group in cell.split(" "):
            pieces = [html.unescape(p) for p in re.findall(r'<span class="nb">([^<]*)</span>', group)]
            for p in pieces[:-1]:
                if p[-1:] not in "_=,/":
                    bad.append("code cell breaks after %r (only after _ = , /)" % p)
    return bad


def reasons(page):
    m = re.search(r'<h2 id="summary">(.*?)(<h2 |$)', page, re.S)
    summary = m.group(1) if m else ""
    return ["the summary cuts a reason: %r" % x for x in re.findall(r".{60}(?:&hellip;|\u2026)", summary)]


def main(check, path):
    page = open(path, encoding="utf-8").read()
    checks = {"links": links, "code": code, "reasons": reasons}
    bad = []
    for name, fn in checks.items():
        if check in (name, "all"):
            bad += fn(page)
    for b in bad[:20]:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
