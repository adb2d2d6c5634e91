"""`cattr serve` (docs/serve.md) as a client sees it: every endpoint, the answers against `cattr explain`'s own output
(bit for bit), the errors (status, message, the server still serving after each), the token, back-pressure (503 and
Retry-After), timeouts, a client that leaves, a slow client, a graceful SIGTERM, a bounded load on loopback, and the
Python client. Runs the command (CATTR_CLI, or build/cattr) as a subprocess, with the standard library's HTTP client;
cattr.client is loaded from its file, so that this runs without the library in this process (sanitizer builds)."""
import http.client
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODEL = os.path.join(ROOT, "models", "digits", "digits.onnx")
SAMPLES = os.path.join(ROOT, "models", "digits", "samples")


def _exe():
    exe = os.environ.get("CATTR_CLI") or os.path.join(ROOT, "build", "cattr")
    if not os.access(exe, os.X_OK):
        pytest.skip("no cattr command at %s (set CATTR_CLI)" % exe)
    r = subprocess.run([exe, "serve", "--help"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("this cattr has no serve: " + r.stderr.strip())
    return exe


def _client_module():
    spec = importlib.util.spec_from_file_location("cattr_client", os.path.join(ROOT, "python", "cattr", "client.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def _digits():
    lab = json.load(open(os.path.join(SAMPLES, "labels.json")))
    x = np.concatenate([np.load(os.path.join(SAMPLES, n)) for n in lab["order"]])
    return x.astype(np.float32), [int(lab["files"][n]["label"]) for n in lab["order"]]


class Server:
    def __init__(self, *args):
        self.err = tempfile.NamedTemporaryFile("w+", suffix=".log")
        self.p = subprocess.Popen([_exe(), "serve", "--model", "digits=" + MODEL, "--port", "0"] + list(args),
                                  stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self.p.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.p.kill()
            self.err.seek(0)
            raise AssertionError("serve did not start: %r %s" % (line, self.err.read()))
        self.port = int(m.group(1))
        self.url = "http://127.0.0.1:%d" % self.port

    def call(self, method, path, body=None, headers=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        c.request(method, path, body=data, headers=headers or {})
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        try:
            j = json.loads(text)
        except ValueError:
            j = None
        return r.status, dict(r.getheaders()), j if j is not None else text

    def metric(self, name):
        _, _, text = self.call("GET", "/metrics")
        m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
        return float(m.group(1)) if m else 0.0

    def wait_running(self, n=1, limit=30):
        t0 = time.time()
        while self.metric("cattr_jobs_running") < n:
            assert time.time() - t0 < limit, "no job started"
            time.sleep(0.02)

    def stop(self, sig=signal.SIGTERM, limit=60):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        rc = self.p.wait(limit)
        self.err.seek(0)
        return rc, self.err.read()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def _cli_json(tmp_path, x, args):
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "cli.json"
    r = subprocess.run([_exe(), "explain", MODEL, "--input", str(tmp_path / "x.npy"), "--output", str(out), "--quiet"]
                       + args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.load(open(out))


SLOW = {"method": "integrated-gradients", "n_steps": 400000, "quadrature": "riemann_left"}  # seconds on digits


def test_endpoints_and_the_numbers_of_cattr_explain(tmp_path):
    x, labels = _digits()
    with Server() as s:
        assert s.call("GET", "/health")[:3:2] == (200, {"status": "ok", "models": 1})
        assert s.call("GET", "/v1/models")[2] == {"models": ["digits"]}
        st, _, m = s.call("GET", "/v1/models/digits")
        assert st == 200 and m["ready"] and m["inputs"] == [{"name": "input", "shape": [-1, 1, 8, 8]}]
        assert m["outputs"] == ["logits"]
        st, h, p = s.call("POST", "/v1/models/digits:predict", {"instances": x.tolist()})
        assert st == 200 and h["Content-Type"] == "application/json"
        pred = np.asarray(p["predictions"])
        assert pred.shape == (len(labels), 10) and list(pred.argmax(1)) == labels
        cases = [({"method": "integrated-gradients", "n_steps": 50, "target": labels},
                  ["--method", "integrated-gradients", "--steps", "50", "--targets", ",".join(map(str, labels))]),
                 ({"method": "saliency", "abs": False}, ["--method", "saliency", "--signed"]),
                 ({"method": "occlusion", "sliding_window_shapes": [1, 2, 2], "strides": [1, 2, 2], "target": 3},
                  ["--method", "occlusion", "--sliding-window", "1,2,2", "--strides", "1,2,2", "--target", "3"]),
                 ({"method": "deeplift", "baselines": 0.25, "target": 3},
                  ["--method", "deeplift", "--baseline", "0.25", "--target", "3"])]
        for ex, args in cases:
            st, _, got = s.call("POST", "/v1/models/digits:explain", {"instances": x.tolist(), "explanation": ex})
            assert st == 200, got
            want = _cli_json(tmp_path, x, args)
            assert got["model"] == "digits" and got["method"] == want["method"]
            for k in ("attributions", "convergence_delta", "target", "args"):
                assert got[k] == want[k], (ex, k)
        # the predicted class when no target is given, as the CLI
        st, _, got = s.call("POST", "/v1/models/digits:explain", {"instances": x[:1].tolist()})
        assert st == 200 and got["method"] == "integrated-gradients" and got["target"] == [[labels[0]]]
        # model memory: the file, the weights (the ONNX file's float32 initializers), the process
        assert s.metric('cattr_model_file_bytes{model="digits"}') == os.path.getsize(MODEL)
        assert 0 < s.metric('cattr_model_weight_bytes{model="digits"}') < os.path.getsize(MODEL)
        assert s.metric("process_resident_memory_bytes") > 1e6
        rc, err = s.stop()
    assert rc == 0, err
    assert '"POST /v1/models/digits:explain" 200' in err and "stopped" in err


def test_kept_explainers_answer_each_request_as_a_fresh_one(tmp_path):
    """One worker keeps 4 explainers: 6 kinds of request in turn, twice (each kept one replaced before it comes
    back), a target and a batch that change under a kept explainer, a request cancelled mid-call (its explainer is
    dropped) and the same kind again: every answer is the one `cattr explain` writes for it."""
    x, labels = _digits()
    kinds = [({"method": "integrated-gradients", "n_steps": 8, "target": 3}, ["--method", "integrated-gradients",
                                                                              "--steps", "8", "--target", "3"]),
             ({"method": "integrated-gradients", "n_steps": 8, "target": 5}, ["--method", "integrated-gradients",
                                                                              "--steps", "8", "--target", "5"]),
             ({"method": "integrated-gradients", "n_steps": 16, "target": 3}, ["--method", "integrated-gradients",
                                                                               "--steps", "16", "--target", "3"]),
             ({"method": "saliency", "target": 3}, ["--method", "saliency", "--target", "3"]),
             ({"method": "saliency", "abs": False, "target": 3}, ["--method", "saliency", "--signed", "--target", "3"]),
             ({"method": "occlusion", "sliding_window_shapes": [1, 2, 2], "target": 3},
              ["--method", "occlusion", "--sliding-window", "1,2,2", "--target", "3"]),
             ({"method": "deeplift", "baselines": 0.25, "target": 3}, ["--method", "deeplift", "--baseline", "0.25",
                                                                        "--target", "3"])]
    with Server("--workers", "1", "--timeout", "2") as s:
        def ask(ex, rows):
            st, _, got = s.call("POST", "/v1/models/digits:explain", {"instances": x[rows].tolist(), "explanation": ex})
            assert st == 200, got
            return {k: got[k] for k in ("attributions", "convergence_delta", "target", "args")}

        def want(args, rows):
            w = _cli_json(tmp_path, x[rows], args)
            return {k: w[k] for k in ("attributions", "convergence_delta", "target", "args")}

        rows = [slice(0, 1), slice(0, 3)]  # the batch changes between the two rounds
        for r in rows:
            for ex, args in kinds:
                assert ask(ex, r) == want(args, r), (ex, r)
        st, _, j = s.call("POST", "/v1/models/digits:explain", {"instances": x[:1].tolist(), "explanation": SLOW})
        assert st == 504 and j["kind"] == "cancelled", (st, j)
        slow_again = dict(SLOW, n_steps=20)  # a kind like the cancelled one, then the cancelled kind's parameters
        assert ask(slow_again, slice(0, 2)) == want(["--method", "integrated-gradients", "--steps", "20",
                                                     "--quadrature", "riemann_left"], slice(0, 2))
        assert ask(kinds[0][0], slice(0, 2)) == want(kinds[0][1], slice(0, 2))
        rc, err = s.stop()
    assert rc == 0, err


def test_errors_are_json_with_the_cli_messages_and_the_server_keeps_serving():
    x, _ = _digits()
    inst = x[:2].tolist()
    r = subprocess.run([_exe(), "explain", MODEL, "--method", "no-such", "--input", "x.npy", "--output", "o.json"],
                       capture_output=True, text=True)
    cli_msg = r.stderr.strip().removeprefix("cattr: ")
    with Server("--max-body", "64K") as s:
        E = "/v1/models/digits:explain"
        cases = [
            ("POST", E, b"{not json", 400, "not JSON"),
            ("POST", E, b"", 400, "empty"),
            ("POST", E, {"instances": []}, 400, "one or more"),
            ("POST", E, {"instances": inst, "extra": 1}, 400, "unknown field 'extra'"),
            ("POST", E, {"instances": inst, "explanation": {"method": "no-such"}}, 400, cli_msg),
            ("POST", E, {"instances": inst, "explanation": {"n_stepz": 3}}, 400, "unknown option 'n_stepz' (known: method"),
            ("POST", E, {"instances": inst, "explanation": {"n_steps": "many"}}, 400, "--steps"),
            ("POST", E, {"instances": inst, "explanation": {"target": [1]}}, 400, "1 targets for 2 instances"),
            ("POST", E, {"instances": inst, "explanation": {"target": 10}}, 400, "target"),
            ("POST", E, {"instances": [inst[0], inst[0][0]]}, 400, "instances[1]"),
            ("POST", E, {"instances": [[[["a"] * 8] * 8]]}, 400, "instances[0][0][0][0]: a string"),
            ("POST", E, {"instances": np.zeros((1, 1, 8, 9)).tolist()}, 400, "shape"),
            ("POST", "/v1/models/nope:explain", {"instances": inst}, 404, "no model called 'nope"),
            ("GET", E, None, 405, "use POST"),
            ("POST", "/health", b"{}", 405, "use GET"),
            ("GET", "/nothing", None, 404, "no route"),
            ("POST", E, b"[" + b"0," * 40000 + b"0]", 413, "--max-body"),
        ]
        for method, path, body, status, text in cases:
            st, h, j = s.call(method, path, body)
            assert st == status, (path, body if not isinstance(body, bytes) else body[:40], j)
            assert isinstance(j, dict) and text in j["error"], (text, j)
            assert j["code"] in (1, 2) and j["kind"], j
            assert h["Content-Type"] == "application/json"
            assert s.call("GET", "/health")[0] == 200
        assert s.call("POST", "/v1/models/digits:predict", {"instances": inst})[0] == 200
        assert s.metric('cattr_requests_total{route="explain",status="400"}') >= 10
        rc, err = s.stop()
    assert rc == 0, err


def test_token(tmp_path):
    tok = tmp_path / "token"
    tok.write_text("0123456789abcdef0123\n")
    with Server("--token-file", str(tok)) as s:
        assert s.call("GET", "/health")[0] == 200  # health needs no token
        st, h, j = s.call("GET", "/v1/models")
        assert st == 401 and h.get("WWW-Authenticate") == "Bearer" and "Bearer" in j["error"]
        assert s.call("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert s.call("GET", "/v1/models", headers={"Authorization": "Bearer 0123456789abcdef012"})[0] == 401
        assert s.call("GET", "/v1/models", headers={"Authorization": "Bearer 0123456789abcdef0123"})[0] == 200
        c = _client_module().Client(s.url, token="0123456789abcdef0123")
        assert c.models() == ["digits"]
    tok.write_text("short\n")
    r = subprocess.run([_exe(), "serve", "--model", "digits=" + MODEL, "--token-file", str(tok)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "16 characters" in r.stderr


def test_full_queue_503_and_timeout_504():
    x, _ = _digits()
    with Server("--workers", "1", "--queue", "0", "--timeout", "2") as s:
        out = {}
        t = threading.Thread(target=lambda: out.update(r=s.call("POST", "/v1/models/digits:explain",
                                                              {"instances": x[:1].tolist(), "explanation": SLOW})))
        t0 = time.time()
        t.start()
        s.wait_running()
        st, h, j = s.call("POST", "/v1/models/digits:predict", {"instances": x[:1].tolist()})
        assert st == 503 and h["Retry-After"] == "1" and "queue is full" in j["error"]
        t.join(60)
        st, _, j = out["r"]
        assert st == 504 and j["kind"] == "cancelled" and time.time() - t0 < 30, (st, j)
        assert s.call("POST", "/v1/models/digits:predict", {"instances": x[:1].tolist()})[0] == 200
        assert s.metric('cattr_errors_total{kind="cancelled"}') == 1
        rc, err = s.stop()
    assert rc == 0, err


def test_a_client_that_leaves_frees_its_worker():
    x, _ = _digits()
    with Server("--workers", "1") as s:
        body = json.dumps({"instances": x[:1].tolist(), "explanation": SLOW}).encode()
        so = socket.create_connection(("127.0.0.1", s.port))
        so.sendall(b"POST /v1/models/digits:explain HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(body) + body)
        s.wait_running()
        so.close()
        t0 = time.time()
        st, _, p = s.call("POST", "/v1/models/digits:predict", {"instances": x[:1].tolist()})
        assert st == 200 and time.time() - t0 < 5, time.time() - t0  # the slow job was cancelled, not finished
        rc, err = s.stop()
    assert rc == 0, err
    assert '"POST /v1/models/digits:explain" 499' in err


def test_a_slow_client_does_not_hold_up_the_others():
    x, labels = _digits()
    with Server("--workers", "1") as s:
        body = json.dumps({"instances": x.tolist()}).encode()
        so = socket.create_connection(("127.0.0.1", s.port))
        so.sendall(b"POST /v1/models/digits:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        sent = 0
        while sent < len(body) // 2:  # half the body, in dribbles
            so.sendall(body[sent:sent + 97])
            sent += len(body[sent:sent + 97])
        t0 = time.time()
        for _ in range(5):
            assert s.call("GET", "/health")[0] == 200
            assert s.call("POST", "/v1/models/digits:predict", {"instances": x[:1].tolist()})[0] == 200
        assert time.time() - t0 < 5
        so.sendall(body[sent:])
        so.settimeout(30)
        r = http.client.HTTPResponse(so)
        r.begin()
        assert r.status == 200
        pred = np.asarray(json.loads(r.read())["predictions"])
        so.close()
        assert list(pred.argmax(1)) == labels


def test_sigterm_finishes_the_running_request_then_exits():
    x, _ = _digits()
    with Server("--workers", "1") as s:
        out = {}
        ex = dict(SLOW, n_steps=60000)
        t = threading.Thread(target=lambda: out.update(r=s.call("POST", "/v1/models/digits:explain",
                                                              {"instances": x[:1].tolist(), "explanation": ex})))
        t.start()
        s.wait_running()
        s.p.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        st, _, j = s.call("GET", "/health")
        assert st == 503 and j["status"] == "shutting down"
        assert s.call("POST", "/v1/models/digits:predict", {"instances": x[:1].tolist()})[0] == 503
        t.join(120)
        assert out["r"][0] == 200 and out["r"][2]["attributions"][0]["shape"] == [1, 1, 8, 8]
        rc, err = s.stop()
    assert rc == 0 and "SIGTERM: finishing 1 running" in err and "stopped" in err, err


def test_load_on_loopback_8_clients_2000_requests():
    """8 concurrent clients, 2000 explanations of the digits model: every one answered 200 with the same numbers"""
    x, labels = _digits()
    body = {"instances": x[:1].tolist(), "explanation": {"method": "integrated-gradients", "n_steps": 20, "target": 3}}
    lat, bad, first = [], [], {}
    lock = threading.Lock()
    with Server() as s:
        def client(n):
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)  # keep-alive, as a load balancer does
            data = json.dumps(body).encode()
            for _ in range(n):
                t0 = time.perf_counter()
                c.request("POST", "/v1/models/digits:explain", body=data, headers={"Content-Type": "application/json"})
                r = c.getresponse()
                text = r.read()
                dt = time.perf_counter() - t0
                with lock:
                    lat.append(dt)
                    if r.status != 200:
                        bad.append((r.status, text[:200]))
                    elif first.setdefault("a", text) != text:
                        bad.append(("differs", text[:200]))
            c.close()
        t0 = time.perf_counter()
        ts = [threading.Thread(target=client, args=(250,)) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.perf_counter() - t0
        assert not bad, bad[:3]
        assert len(lat) == 2000
        assert s.metric('cattr_requests_total{route="explain",status="200"}') == 2000
        rc, err = s.stop()
    assert rc == 0
    q = np.percentile(np.asarray(lat) * 1e3, [50, 95, 99])
    print("serve load: 2000 requests, 8 clients: %.0f requests/s; latency p50 %.1f ms, p95 %.1f ms, p99 %.1f ms"
          % (2000 / wall, *q))


def test_python_client(tmp_path):
    cl = _client_module()
    x, labels = _digits()
    with Server() as s:
        c = cl.Client(s.url)
        assert c.health()["status"] == "ok" and c.models() == ["digits"]
        assert list(c.predict("digits", x).argmax(1)) == labels
        r = c.explain("digits", x[:2], method="integrated-gradients", target=labels[:2], n_steps=50)
        want = _cli_json(tmp_path, x[:2], ["--steps", "50", "--targets", "%d,%d" % tuple(labels[:2])])
        np.testing.assert_array_equal(r["attributions"][0],
                                      np.asarray(want["attributions"][0]["data"]).reshape(2, 1, 8, 8))
        assert r["convergence_delta"].shape == (2,)
        mask = np.arange(64).reshape(1, 8, 8) // 16  # arrays as arrays
        r = c.explain("digits", x[:2], method="feature-ablation", target=3, feature_mask=mask, baselines=np.ones((1, 8, 8)))
        np.save(tmp_path / "m.npy", mask[None])
        np.save(tmp_path / "b.npy", np.ones((1, 1, 8, 8), np.float32))
        want = _cli_json(tmp_path, x[:2], ["--method", "feature-ablation", "--target", "3", "--feature-mask",
                                           str(tmp_path / "m.npy"), "--baseline", str(tmp_path / "b.npy")])
        np.testing.assert_array_equal(r["attributions"][0],
                                      np.asarray(want["attributions"][0]["data"]).reshape(2, 1, 8, 8))
        with pytest.raises(cl.ServeError) as e:
            c.explain("digits", x[:1], method="no-such")
        assert e.value.status == 400 and e.value.code == 2 and "unknown method 'no-such'" in e.value.message
        assert "cattr_requests_total" in c.metrics()


def test_web_page_in_headless_chromium(tmp_path):
    """GET / serves the page; headless Chromium loads it with ?auto=1 (a fixed input pattern, two methods side by side)
    and its rendered sums equal the API's answers for the same input"""
    import shutil
    if not shutil.which("chromium"):
        pytest.skip("chromium is not installed (apt-get install chromium; scripts/deps.sh --test does it)")
    with Server() as s:
        st, h, page = s.call("GET", "/")
        assert st == 200 and h["Content-Type"].startswith("text/html") and "cattr serve" in page
        assert "connect-src 'self'" in h["Content-Security-Policy"]
        assert "http://" not in page and "https://" not in page  # nothing from the network: no CDN
        url = s.url + "/?auto=1&model=digits&method=saliency&compare=integrated-gradients&target=3&steps=32"
        out_dir = os.environ.get("CATTR_TEST_OUTPUT") or str(tmp_path)
        shot = os.path.join(out_dir, "serve_page.png")
        base = ["timeout", "120", "chromium", "--headless", "--no-sandbox", "--disable-gpu",
                "--user-data-dir=" + str(tmp_path / "profile"), "--virtual-time-budget=20000"]
        dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True).stdout
        m = re.search(r'id="status"[^>]*data-state="(\w+)"[^>]*>([^<]*)<', dom) or \
            re.search(r'data-state="(\w+)"[^>]*id="status"[^>]*>([^<]*)<', dom)
        assert m and m.group(1) == "done", (m and m.groups(), dom[-2000:])
        sums = dict(re.findall(r'data-method="([\w-]+)" data-sum="([^"]+)"', dom))
        assert set(sums) == {"saliency", "integrated-gradients"}, dom[-2000:]
        x = (np.arange(64) % 7 / 6).reshape(1, 1, 8, 8).tolist()  # the page's pattern
        for method, ex in (("saliency", {"method": "saliency", "target": 3}),
                           ("integrated-gradients", {"method": "integrated-gradients", "target": 3, "n_steps": 32})):
            st, _, r = s.call("POST", "/v1/models/digits:explain", {"instances": x, "explanation": ex})
            assert st == 200
            want = float(np.sum(np.asarray(r["attributions"][0]["data"], dtype=np.float64)))
            assert abs(float(sums[method]) - want) <= 1e-9 * max(1.0, abs(want)), (method, sums[method], want)
        subprocess.run(base + ["--window-size=1100,900", "--screenshot=" + shot, url], capture_output=True)
        assert os.path.getsize(shot) > 10000
        print("serve page screenshot: %s" % shot)


def test_web_page_with_a_language_model_in_headless_chromium(tmp_path):
    """the page with a checkpoint: the prompt's tokens coloured by two methods, their sums the API's"""
    import shutil
    import urllib.parse
    if not shutil.which("chromium"):
        pytest.skip("chromium is not installed (apt-get install chromium; scripts/deps.sh --test does it)")
    tiny = os.path.join(ROOT, "tests", "data", "llm", "tiny")
    with Server("--model", "tiny=" + tiny) as s:
        q = urllib.parse.urlencode({"auto": 1, "model": "tiny", "method": "layer-ig", "compare": "feature-ablation",
                                    "prompt": "The capital of France is", "target_text": " Paris", "steps": 16})
        base = ["timeout", "120", "chromium", "--headless", "--no-sandbox", "--disable-gpu",
                "--user-data-dir=" + str(tmp_path / "profile"), "--virtual-time-budget=20000"]
        dom = subprocess.run(base + ["--dump-dom", s.url + "/?" + q], capture_output=True, text=True).stdout
        assert 'data-state="done"' in dom, dom[-2000:]
        sums = dict(re.findall(r'data-method="([\w-]+)" data-sum="([^"]+)"', dom))
        assert set(sums) == {"layer-ig", "feature-ablation"}, dom[-2000:]
        assert dom.count('class="tok"') >= 8  # the prompt's tokens, twice
        for method, extra in (("layer-ig", {"steps": 16}), ("feature-ablation", {})):
            st, _, r = s.call("POST", "/v1/models/tiny:explain", dict({"prompt": "The capital of France is",
                                                                       "target": " Paris", "method": method}, **extra))
            assert st == 200
            want = sum(r["seq_attr"])
            assert abs(float(sums[method]) - want) <= 1e-9 * max(1.0, abs(want)), (method, sums[method], want)
        shot = os.path.join(os.environ.get("CATTR_TEST_OUTPUT") or str(tmp_path), "serve_page_llm.png")
        subprocess.run(base + ["--window-size=1100,700", "--screenshot=" + shot, s.url + "/?" + q], capture_output=True)
        assert os.path.getsize(shot) > 10000
        print("serve page screenshot: %s" % shot)


def _safetensors(tensors):
    head, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        b = a.tobytes()
        head[name] = {"dtype": {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64"}[a.dtype],
                      "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    return len(h).to_bytes(8, "little") + h + b"".join(blobs)


def test_npy_and_safetensors_bodies_with_options_in_the_query(tmp_path):
    import io
    x, labels = _digits()
    buf = io.BytesIO()
    np.save(buf, x)
    npy = buf.getvalue()
    with Server() as s:
        q = "?method=occlusion&target=3&sliding_window_shapes=[1,2,2]&strides=[1,2,2]"
        st, _, got = s.call("POST", "/v1/models/digits:explain" + q, npy, {"Content-Type": "application/x-npy"})
        assert st == 200, got
        want = _cli_json(tmp_path, x, ["--method", "occlusion", "--target", "3", "--sliding-window", "1,2,2",
                                       "--strides", "1,2,2"])
        assert got["attributions"] == want["attributions"]
        st, _, got2 = s.call("POST", "/v1/models/digits:explain" + q, _safetensors({"input": x}),
                             {"Content-Type": "application/x-safetensors"})
        assert st == 200 and got2["attributions"] == want["attributions"]
        st, _, p = s.call("POST", "/v1/models/digits:predict", npy, {"Content-Type": "application/octet-stream"})
        assert st == 200 and list(np.asarray(p["predictions"]).argmax(1)) == labels
        for body, ctype, path, status, text in [
                (npy[:50], "application/x-npy", "/v1/models/digits:predict", 400, ".npy body"),
                (_safetensors({"image": x}), "application/x-safetensors", "/v1/models/digits:predict", 400,
                 "no input called 'image'"),
                (npy, "application/x-npy", "/v1/models/digits:explain?n_stepz=3", 400, "unknown option 'n_stepz'"),
                (npy, "application/x-npy", "/v1/models/digits:explain?method=nope", 400, "unknown method 'nope'"),
                (json.dumps({"instances": x.tolist()}).encode(), "application/json", "/v1/models/digits:explain?target=3",
                 400, "query arguments"),
                (npy, "image/png", "/v1/models/digits:predict", 415, "Content-Type 'image/png'")]:
            st, _, j = s.call("POST", path, body, {"Content-Type": ctype})
            assert st == status and text in j["error"], (path, ctype, st, j)
        assert s.metric('cattr_requests_total{route="predict",status="415"}') == 1
        rc, err = s.stop()
    assert rc == 0, err


def test_baselines_and_feature_masks_as_lists_and_body_tensors(tmp_path):
    """baselines and feature_mask as nested lists (one instance's shape, or the instances') and as tensors of a
    .safetensors body: the answers of `cattr explain` with the same arrays in .npy files; bad lists are 400s"""
    x, _ = _digits()
    x = x[:3]
    base = (np.arange(64).reshape(1, 8, 8) / 64).astype(np.float32)
    mask = np.arange(64).reshape(1, 8, 8) // 16
    masks = np.stack([mask, mask % 2, mask * 0])
    np.save(tmp_path / "base.npy", base[None])
    np.save(tmp_path / "mask.npy", mask[None])
    np.save(tmp_path / "masks.npy", masks)
    ig = ["--method", "integrated-gradients", "--steps", "8", "--target", "3"]
    fa = ["--method", "feature-ablation", "--target", "3"]
    with Server() as s:
        for ex, args in [(dict(method="integrated-gradients", n_steps=8, target=3, baselines=base.tolist()),
                          ig + ["--baseline", str(tmp_path / "base.npy")]),
                         (dict(method="feature-ablation", target=3, feature_mask=mask.tolist(), baselines=0.5),
                          fa + ["--feature-mask", str(tmp_path / "mask.npy"), "--baseline", "0.5"]),
                         (dict(method="feature-ablation", target=3, feature_mask=masks.tolist()),
                          fa + ["--feature-mask", str(tmp_path / "masks.npy")])]:
            st, _, got = s.call("POST", "/v1/models/digits:explain", {"instances": x.tolist(), "explanation": ex})
            assert st == 200, got
            assert got["attributions"] == _cli_json(tmp_path, x, args)["attributions"], ex
        body = _safetensors({"input": x, "baselines": base[None], "feature_mask": mask[None].astype(np.float32)})
        st, _, got = s.call("POST", "/v1/models/digits:explain?method=feature-ablation&target=3", body,
                            {"Content-Type": "application/x-safetensors"})
        assert st == 200, got
        assert got["attributions"] == _cli_json(tmp_path, x, fa + ["--feature-mask", str(tmp_path / "mask.npy"),
                                                                   "--baseline", str(tmp_path / "base.npy")])["attributions"]
        for ex, text in [({"method": "feature-ablation", "feature_mask": [[1, 2]]}, "nested lists of 2 dims"),
                         ({"method": "feature-ablation", "feature_mask": (mask + 0.5).tolist()}, "are integers"),
                         ({"method": "feature-ablation", "feature_mask": "x"}, "nested lists of integers"),
                         ({"baselines": [[[1, 2]]]}, "baseline 0 has shape [1, 1, 1, 2]"),
                         ({"baselines": [[[1, 2], [3]]]}, "explanation.baselines[0][1]")]:
            st, _, j = s.call("POST", "/v1/models/digits:explain", {"instances": x.tolist(), "explanation": ex})
            assert st == 400 and text in j["error"], (ex, j)
        st, _, j = s.call("POST", "/v1/models/digits:explain?baselines=0.5", body,
                          {"Content-Type": "application/x-safetensors"})
        assert st == 400 and "given in the body and in the query" in j["error"], j
        rc, err = s.stop()
    assert rc == 0, err


def test_language_model_checkpoint_answers_explain_llm_requests(tmp_path):
    """a checkpoint folder served: :explain takes an explain-llm request line and answers the record corpus mode
    writes for it (the same numbers); :predict and file-valued segments are refused"""
    tiny = os.path.join(ROOT, "tests", "data", "llm", "tiny")
    rq = {"prompt": "The capital of France is", "target": " Paris", "method": "layer-ig", "steps": 16}
    (tmp_path / "rq.jsonl").write_text(json.dumps(dict(rq, id="a")) + "\n")
    r = subprocess.run([_exe(), "explain-llm", tiny, "--prompts", str(tmp_path / "rq.jsonl"), "--output",
                        str(tmp_path / "out.jsonl"), "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = [json.loads(l) for l in open(tmp_path / "out.jsonl") if l.strip() and '"id"' in l][-1]
    with Server("--model", "tiny=" + tiny) as s:
        assert s.call("GET", "/v1/models")[2] == {"models": ["digits", "tiny"]}
        st, _, m = s.call("GET", "/v1/models/tiny")
        assert st == 200 and m["kind"] == "language-model"
        st, _, got = s.call("POST", "/v1/models/tiny:explain", rq)
        assert st == 200, got
        for k in ("seq_attr", "token_attr", "input_tokens", "output_tokens", "target_logprobs", "convergence_delta"):
            assert got[k] == want[k], k
        for body, text in [({"prompt": "x", "segments": "/etc/passwd"}, "'segments' must be"),
                           ({"prompt": "x", "method": "nope"}, "nope"),
                           ({"prompt": "x", "colour": 1}, "colour")]:
            st, _, j = s.call("POST", "/v1/models/tiny:explain", body)
            assert st == 400 and text in j["error"], (body, j)
        st, _, j = s.call("POST", "/v1/models/tiny:predict", rq)  # an explain request is no generation request
        assert st == 400 and "unknown field" in j["error"], j
        rc, err = s.stop()
    assert rc == 0, err


def test_checkpoint_answers_explain_context_requests(tmp_path):
    """a body with a "question": explain-context's request line and options, answered with the record its corpus mode
    writes (the same sources, scores and quality numbers; timings aside); options that would need files refused"""
    tiny = os.path.join(ROOT, "tests", "data", "llm", "tiny")
    line = {"id": "q1", "question": "Where is Paris?", "contexts": ["Paris is in France. It is big.", "Rome is in Italy."],
            "answer": " France"}
    tmpl = "C: {context} Q: {question} A:"
    (tmp_path / "rq.jsonl").write_text(json.dumps(line) + "\n")
    r = subprocess.run([_exe(), "explain-context", tiny, "--requests", str(tmp_path / "rq.jsonl"), "--output",
                        str(tmp_path / "out.jsonl"), "--method", "surrogate", "--sources", "sentences", "--samples", "16",
                        "--seed", "3", "--quality", "--template", tmpl, "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = [json.loads(l) for l in open(tmp_path / "out.jsonl") if '"q1"' in l][-1]
    with Server("--model", "tiny=" + tiny) as s:
        st, _, got = s.call("POST", "/v1/models/tiny:explain", dict(line, method="surrogate", sources="sentences",
                                                                    samples=16, seed=3, quality=True, template=tmpl))
        assert st == 200, got
        assert len(got["sources"]) == 3 and got["lds"] == want["lds"]
        for k in want:
            if k not in ("timings_s", "id", "request_hash"):
                assert got[k] == want[k], k
        for body, text in [(dict(line, method="proxy"), "proxy method is not served"),
                           (dict(line, sources="spans.json"), "'sources' must be"),
                           (dict(line, context_files=["/etc/hostname"]), "would read files on the server"),
                           (dict(line, samples=1), "--samples"),
                           (dict(line, colour=1), "unknown field 'colour'"),
                           (dict(line, quality="yes"), "true or false"),
                           (('{"question": "q", "contexts": ["a"]' + ', "seed": 1' * 40 + "}").encode(), "'seed' is given twice")]:
            st, _, j = s.call("POST", "/v1/models/tiny:explain", body)
            assert st == 400 and text in j["error"], (body, j)
        rc, err = s.stop()
    assert rc == 0, err


def test_checkpoint_predict_generates(tmp_path):
    """a checkpoint's :predict: each prompt's greedy continuation, the tokens explain-llm generates for the same
    prompt (its record's output_ids); bad bodies are 400s (the cancel flag that --timeout sets: test_llm_paths)"""
    tiny = os.path.join(ROOT, "tests", "data", "llm", "tiny")
    (tmp_path / "rq.jsonl").write_text(json.dumps({"id": "g", "prompt": "The capital of France is",
                                                   "max_new_tokens": 5, "method": "feature-ablation"}) + "\n")
    r = subprocess.run([_exe(), "explain-llm", tiny, "--prompts", str(tmp_path / "rq.jsonl"), "--output",
                        str(tmp_path / "out.jsonl"), "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = [json.loads(l) for l in open(tmp_path / "out.jsonl") if '"g"' in l][-1]
    with Server("--model", "tiny=" + tiny) as s:
        st, _, got = s.call("POST", "/v1/models/tiny:predict",
                            {"instances": ["The capital of France is", {"prompt": "Hello", "max_new_tokens": 2}],
                             "max_new_tokens": 5})
        assert st == 200, got
        p0, p1 = got["predictions"]
        assert p0["token_ids"] == want["output_ids"] and p0["text"] == "".join(want["output_tokens"])
        assert len(p1["token_ids"]) == 2
        c = _client_module().Client(s.url)  # the Python client's forms of the three requests
        assert c.generate("tiny", "The capital of France is", max_new_tokens=5) == p0
        r = c.explain_llm("tiny", "The capital of France is", max_new_tokens=5, method="feature-ablation")
        assert r["output_ids"] == want["output_ids"] and r["seq_attr"] == want["seq_attr"]
        r = c.explain_context("tiny", "Where?", ["Paris is in France.", "Rome is in Italy."], answer=" France",
                              template="C: {context} Q: {question} A:")
        assert len(r["sources"]) == 2 and r["method"] == "loo"
        for body, text in [({"instances": []}, "1 to 64 prompts"), ({"instances": [""]}, "non-empty string"),
                           ({"instances": ["a"], "max_new_tokens": 0}, "from 1 to 4096"),
                           ({"instances": [{"prompt": "a", "top_k": 3}]}, "unknown field 'top_k'"),
                           ({"prompts": ["a"]}, "unknown field 'prompts'")]:
            st, _, j = s.call("POST", "/v1/models/tiny:predict", body)
            assert st == 400 and text in j["error"], (body, j)
        rc, err = s.stop()
    assert rc == 0, err


def test_image_norm_and_bad_command_lines():
    with Server("--image-norm", "digits=1/16:0.5:0.25") as s:
        st, _, m = s.call("GET", "/v1/models/digits")
        assert st == 200 and m["image"] == {"scale": "1/16", "mean": "0.5", "std": "0.25"}
    for args, text in [(["--image-norm", "nope=1:0:1"], "for a --model NAME"),
                       (["--image-norm", "digits=1:0"], "SCALE:MEAN:STD"),
                       (["--model", "bad name=" + MODEL], "NAME=PATH"),
                       (["--model", "digits=" + MODEL], "given twice"),
                       (["--port", "70000"], "--port"),
                       (["--host", "not-an-address"], "--host"),
                       (["--model", "x=/nonexistent.onnx"], "/nonexistent.onnx"),
                       (["--bogus"], "unknown option '--bogus'")]:
        r = subprocess.run([_exe(), "serve", "--model", "digits=" + MODEL] + args, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2 and text in r.stderr, (args, r.returncode, r.stderr)
