"""The generated Prometheus rules and dashboards checked by the tools operators run: promtool (rules,
alert unit tests, PromQL) and yamllint."""

import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

from hotpath import paths
from hotpath.monitoring.dashboard import dashboard, expressions
from hotpath.monitoring.endpoints import load_endpoints

MONITORING = paths.ROOT / "monitoring"
SLO = tomllib.loads((paths.ROOT / "perf" / "slo.toml").read_text())["profiles"]


def promtool(*args, cwd=None):
    exe = shutil.which("promtool")
    assert exe, "promtool missing: scripts/setup.sh installs Debian's prometheus package"
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("profile", sorted(SLO))
def test_promtool_accepts_rules(profile):
    result = promtool("check", "rules", str(MONITORING / "rules" / f"hotpath-{profile}.rules.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_alert_unit_tests_pass():
    tests = sorted((MONITORING / "tests").glob("*.test.yml"))
    assert tests
    result = promtool("test", "rules", *map(str, tests))
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_expressions_parse(tmp_path):
    # promtool parses every expression when they are recording rules; variables get concrete values.
    rules = []
    for e in load_endpoints("cpu"):
        for i, expr in enumerate(expressions(dashboard(e))):
            concrete = expr.replace("$instance", ".*").replace("$__rate_interval", "1m")
            rules.append({"record": f"dashboard:{e.name}:{i}", "expr": concrete})
    path = tmp_path / "dashboards.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_a_broken_expression(tmp_path):
    # The parse check above can fail: an unbalanced expression is refused.
    path = tmp_path / "bad.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [
        {"record": "x:y", "expr": "sum by (model) (rate(nv_inference_count[1m])"}]}]}))
    assert promtool("check", "rules", str(path)).returncode != 0


def test_yamllint_accepts_monitoring_and_deploy():
    result = subprocess.run([sys.executable, "-m", "yamllint", "-s", "monitoring", "deploy"],
                            cwd=paths.ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
