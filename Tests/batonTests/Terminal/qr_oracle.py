"""The Python `qrcode` library's matrix for each case on standard input (JSON: text, level L or M, version,
mask), forced to byte mode with no border, as rows of 0 and 1 — what Baton's own encoder must draw."""

import json
import sys

import qrcode
from qrcode.util import MODE_8BIT_BYTE, QRData

levels = {"L": qrcode.constants.ERROR_CORRECT_L, "M": qrcode.constants.ERROR_CORRECT_M}
answers = []
for case in json.load(sys.stdin):
    code = qrcode.QRCode(version=case["version"], error_correction=levels[case["level"]], border=0,
                         mask_pattern=case["mask"])
    code.add_data(QRData(case["text"].encode("utf-8"), mode=MODE_8BIT_BYTE))
    code.make(fit=False)
    answers.append(["".join("1" if dark else "0" for dark in row) for row in code.get_matrix()])
json.dump(answers, sys.stdout)
