"""KafkaJS (tests/js, installed by `make test`): run a Node.js script against a broker and read its answer.

The script is the body of an async function with ``kafkajs`` (the module) and ``args`` (the JSON given) in scope;
what it returns is printed as JSON and handed back. A thrown error fails with the script's stderr.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

JS_DIR = Path(__file__).resolve().parent / "js"

_RUNNER = """
const kafkajs = require('kafkajs');
const args = JSON.parse(process.argv[1]);
(async () => { %s })().then(
  (out) => { process.stdout.write('\\n@@RESULT@@' + JSON.stringify(out === undefined ? null : out) + '\\n'); },
  (err) => { console.error('KafkaJS script failed:', err && (err.stack || err)); process.exit(1); });
"""


def run_kafkajs(script: str, args: dict[str, Any] | None = None, timeout: float = 60.0) -> Any:
    node = shutil.which("node")
    assert node is not None, "node is missing: `make test` installs Node.js and tests/js"
    assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "tests/js/node_modules is missing: run `make js`"
    proc = subprocess.run([node, "-e", _RUNNER % script, json.dumps(args or {})], cwd=JS_DIR, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"KafkaJS script exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    marker = proc.stdout.rfind("@@RESULT@@")
    assert marker >= 0, f"KafkaJS script printed no result:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return json.loads(proc.stdout[marker + len("@@RESULT@@"):].strip())
