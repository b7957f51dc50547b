"""The project's set-up files agree with each other, and JupyterLab serves the notebooks."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
import uuid

import pytest
import yaml

from helpers import env

ROOT = env.REPO_ROOT


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirement_names(requirements):
    return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_pyproject_lists_the_course_packages():
    names = requirement_names(pyproject()["project"]["dependencies"])
    assert {"jupyterlab", "torch", "ninja", "matplotlib", "nbmake"} <= names


def test_environment_yml_parses_and_installs_the_project_from_pyproject():
    spec = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = spec["dependencies"]
    pip_sections = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    assert pip_sections == [["-e .[torch]"]], "versions must have one source of truth: pyproject.toml"
    assert "pip" in deps
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python"))
    version = tuple(int(p) for p in python.split("=")[1].split(".")[:2])
    minimum = pyproject()["project"]["requires-python"].removeprefix(">=")
    assert version >= tuple(int(p) for p in minimum.split(".")[:2])


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make test" in ci
    makefile = (ROOT / "Makefile").read_text()
    for target in ("lab:", "test:", "reproduce:"):
        assert target in makefile
    # torch: use the importable one, else the tested version, named in pyproject.toml alone.
    assert "--system-site-packages" in makefile and '".[torch]"' in makefile
    assert "torch==" not in makefile and "torch==" not in readme
    assert pyproject()["project"]["optional-dependencies"]["torch"] == ["torch==2.13.0"]


def test_build_outputs_and_environments_are_ignored():
    ignored = (ROOT / ".gitignore").read_text().split()
    for entry in (".build/", ".venv/", ".whl/", "reproduced/"):
        assert entry in ignored


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(url, token, method="GET", body=None):
    request = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None)
    request.add_header("Authorization", f"token {token}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        data = response.read()
        return json.loads(data) if data else None


def test_jupyterlab_serves_the_notebooks_and_starts_a_python3_kernel(tmp_path):
    pytest.importorskip("jupyterlab", reason="jupyterlab is not installed")
    port, token = free_port(), uuid.uuid4().hex
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", "--allow-root", f"--ServerApp.root_dir={env.NOTEBOOKS_DIR}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                api(f"{base}/api/status", token)
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail("jupyter lab exited at start")
                time.sleep(0.5)
        else:
            pytest.fail("jupyter lab did not answer within 60 s")
        listed = {item["name"] for item in api(f"{base}/api/contents", token)["content"]}
        assert "00_setup.ipynb" in listed
        assert "python3" in api(f"{base}/api/kernelspecs", token)["kernelspecs"]
        kernel = api(f"{base}/api/kernels", token, "POST", {"name": "python3"})
        assert kernel["name"] == "python3"
        assert any(k["id"] == kernel["id"] for k in api(f"{base}/api/kernels", token))
        api(f"{base}/api/kernels/{kernel['id']}", token, "DELETE")
        # The lab UI itself is served too, not only the API.
        with urllib.request.urlopen(f"{base}/lab?token={token}", timeout=30) as page:
            assert page.status == 200
    finally:
        stop(server)


def stop(server):
    if server.poll() is not None:
        return
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)


def test_an_older_torch_than_the_floor_is_refused_with_the_reason():
    floor = env.torch_floor()
    env.check_torch_version(floor)  # the floor itself runs
    major, minor = (int(part) for part in floor.split(".")[:2])
    with pytest.raises(ImportError, match=rf"needs torch {re.escape(floor)} or newer.*this is torch {major}\.{minor - 1}"):
        env.check_torch_version(f"{major}.{minor - 1}.0")


def test_every_helpers_module_and_every_notebooks_imports_load_on_this_torch():
    """Each in a fresh interpreter: a module-level import of an API this torch lacks fails here
    (on the GPU machines this torch is the floor)."""
    import ast

    import nbformat

    from helpers import __all__ as modules

    lines = [f"import helpers.{name}" for name in modules]
    for path in sorted(env.NOTEBOOKS_DIR.glob("*.ipynb")):
        first = next(c for c in nbformat.read(path, 4).cells if c.cell_type == "code")
        lines += [ast.unparse(node) for node in ast.parse(first.source).body
                  if isinstance(node, (ast.Import, ast.ImportFrom))]
    script = "\n".join(dict.fromkeys(lines)) + "\nprint('imported', flush=True)"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
    assert done.returncode == 0 and done.stdout.strip() == "imported", done.stderr[-3000:]
