"""Reads escaped documents as a browser, an XML parser and a spreadsheet would, and reports any that did not
keep the writer's structure.

Run as `python3 markup_check.py FILE`: FILE holds one JSON object a line, {"kind", "input", "doc", "reference"},
where `doc` is a template filled with the escaped input and `reference` the same template filled with a harmless
word. For "html" and "mustache", html5lib (an HTML5-conforming tokenizer and tree builder) must find the same
elements with the same attribute names in both, and for "html" each attribute value and text must read back as
the input; "xml" must parse (expat) and read back exactly; "csv" must read back as one row of the input's cells,
with a formula disarmed. Prints one line per failure (at most 20), then "N passed, M failed".
"""

import csv
import io
import json
import sys
import xml.etree.ElementTree as ElementTree

import html5lib

FORMULA = ("=", "+", "-", "@", "\t", "\r")


def shape(document):
    tree = html5lib.parse(document, namespaceHTMLElements=False)
    return [(element.tag, sorted(element.attrib)) for element in tree.iter() if isinstance(element.tag, str)]


def html_text(value):
    """What a browser makes of `value` written as text: CR LF and CR become LF, NUL becomes U+FFFD."""
    return value.replace("\r\n", "\n").replace("\r", "\n").replace("\0", "\ufffd")


def check(entry):
    kind, given, document = entry["kind"], entry["input"], entry["doc"]
    if kind in ("html", "mustache"):
        found, expected = shape(document), shape(entry["reference"])
        if found != expected:
            return f"elements {found} where the template wrote {expected}"
        if kind == "html":
            tree = html5lib.parse(document, namespaceHTMLElements=False)
            paragraphs = tree.findall(".//p")
            want = html_text(given)
            for paragraph in paragraphs:
                if paragraph.get("title") != want:
                    return f"title reads back as {paragraph.get('title')!r}"
            if (paragraphs[0].text or "") != want:
                return f"text reads back as {paragraphs[0].text!r}"
        return None
    if kind == "xml":
        root = ElementTree.fromstring(document.encode("utf-8"))
        want = "".join(
            c if c in "\t\n\r" or (ord(c) >= 0x20 and c not in "\ufffe\uffff") else "\ufffd" for c in given)
        if root.get("a") != want or (root.text or "") != want or len(list(root)) != 0:
            return f"reads back as {root.get('a')!r} / {root.text!r}"
        return None
    if kind == "csv":
        rows = list(csv.reader(io.StringIO(document, newline="")))
        if len(rows) != 2 or len(rows[1]) != 3:
            return f"{len(rows)} rows, {[len(row) for row in rows]} cells"
        want = ("'" + given) if given.startswith(FORMULA) else given
        for cell in rows[1]:
            if cell.startswith(FORMULA):
                return f"a cell starts a formula: {cell!r}"
        if rows[1][0] != want or rows[1][2] != want or rows[1][1] != "x":
            return f"cells read back as {rows[1]!r}"
        return None
    return f"unknown kind {kind!r}"


def main():
    passed = failed = 0
    with open(sys.argv[1], encoding="utf-8") as lines:
        for line in lines:
            entry = json.loads(line)
            try:
                problem = check(entry)
            except Exception as error:  # a document that does not parse at all is a failure too
                problem = f"{type(error).__name__}: {error}"
            if problem is None:
                passed += 1
            else:
                failed += 1
                if failed <= 20:
                    print(f"FAIL {entry['kind']} {entry['input']!r}: {problem}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
