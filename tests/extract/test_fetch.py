"""`memtui fetch` and `missing_revisions`: against a hand-built hub cache and a fake hub on 127.0.0.1 (no network)."""

from __future__ import annotations

import _thread
import errno
import hashlib
import io
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from fake_hub import FakeHub, checkpoint_files
from huggingface_hub import constants
from tiny_models import tiny_model

from memtui.cli.main import main
from memtui.core.errors import MemtuiError
from memtui.core.memory import human_decimal
from memtui.extract import fetch
from memtui.extract.checkpoints import Source, weights_hash

REPO = "tiny-org/tiny-neox"


@pytest.fixture
def hf_env(tmp_path, monkeypatch) -> Path:
    """A private Hugging Face home; no token, no offline mode, no endpoint from the developer's environment."""
    home = tmp_path / "hf"
    cache = home / "hub"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    # transformers reads the cache folder from huggingface_hub's constants, which were computed at import
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return cache


@pytest.fixture(scope="module")
def revisions(tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """step0 and step10 of a real tiny GPT-NeoX as the hub would hold them, plus files from_pretrained never reads."""
    root = tmp_path_factory.mktemp("hubrepo")
    out = {}
    for step in (0, 10):
        folder = root / f"step{step}"
        tiny_model(seed=step).save_pretrained(folder)
        files = checkpoint_files(folder)
        assert "model.safetensors" in files and "config.json" in files
        files["optimizer.pt"] = b"optimizer state " * 64
        files["tokenizer.json"] = b"{}"
        files["global_step10/mp_rank_00_model_states.pt"] = b"deepspeed " * 32
        out[f"step{step}"] = files
    return out


def run_fetch(capsys, *argv) -> tuple[int, str, str]:
    """`memtui fetch ARGV` as the CLI runs it (its parser, its error handling): (exit code, stdout, stderr)."""
    code = main(["fetch", *[str(a) for a in argv]])
    out = capsys.readouterr()
    return code, out.out, out.err


def snapshot(cache: Path, revision: str) -> Path:
    storage = cache / ("models--" + REPO.replace("/", "--"))
    return storage / "snapshots" / (storage / "refs" / revision).read_text()


# -- choosing files -------------------------------------------------------------------------------------------------


def test_choose_files_prefers_safetensors_and_skips_everything_else():
    names = [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "pytorch_model.bin",
        "optimizer.pt",
        "tokenizer.json",
        "consolidated.safetensors",
        "global_step1000/model.safetensors",
    ]
    assert fetch.choose_files(names) == ["config.json", "generation_config.json", "model.safetensors"]
    sharded = ["config.json", "model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"]
    sharded.append("model.safetensors.index.json")
    assert fetch.choose_files(sharded) == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    # Pythia's older revisions have .bin weights only
    assert fetch.choose_files(["config.json", "pytorch_model.bin", "special_tokens_map.json"]) == [
        "config.json",
        "pytorch_model.bin",
    ]


# -- missing_revisions against a cache in huggingface_hub's layout ---------------------------------------------------


def _put(storage: Path, revision: str, files: dict[str, bytes], commit: str | None = None) -> Path:
    """Cache ``files`` for ``revision`` as huggingface_hub does: blobs by etag, snapshot links, a ref."""
    commit = commit or hashlib.sha1(revision.encode()).hexdigest()
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    (storage / "refs" / revision).write_text(commit)
    snap = storage / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (storage / "blobs").mkdir(exist_ok=True)
    for name, content in files.items():
        etag = hashlib.sha256(content).hexdigest()
        (storage / "blobs" / etag).write_bytes(content)
        os.symlink(os.path.relpath(storage / "blobs" / etag, snap), snap / name)
    return snap


def test_missing_revisions_reads_the_hub_cache_layout(hf_env):
    storage = hf_env / "models--EleutherAI--pythia-14m"
    config, weights = b'{"model_type": "gpt_neox"}', b"\0" * 64
    _put(storage, "step0", {"config.json": config, "model.safetensors": weights})
    _put(storage, "step1000", {"config.json": config})  # partial: config only
    snap = _put(storage, "step2000", {"config.json": config, "model.safetensors": weights + b"x"})
    os.unlink(storage / "blobs" / hashlib.sha256(weights + b"x").hexdigest())  # link left dangling
    _put(storage, "step3000", {"config.json": config, "pytorch_model.bin": weights})  # bin-only revisions load too
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    _put(
        storage,
        "step4000",
        {
            "config.json": config,
            "model.safetensors.index.json": json.dumps(index).encode(),
            "model-00001-of-00002.safetensors": weights,
        },
    )  # one shard of two
    (storage / "refs" / "step5000").write_text("f" * 40)  # a ref whose snapshot was deleted
    # a snapshot listed by huggingface_hub's tree cache as also having a generation config it has not fetched
    _put(storage, "step6000", {"config.json": config, "model.safetensors": weights}, commit="6" * 40)
    (storage / "trees").mkdir()
    listing = {name: {"size": 1, "blob_id": "0"} for name in ("config.json", "model.safetensors")}
    (storage / "trees" / f"{'6' * 40}.json").write_text(json.dumps({"format_version": 1, "files": listing}))
    steps = [0, 1000, 2000, 3000, 4000, 5000, 6000, 7000]
    assert fetch.missing_revisions("EleutherAI/pythia-14m", steps) == [1000, 2000, 4000, 5000, 7000]
    listing["generation_config.json"] = {"size": 1, "blob_id": "1"}
    (storage / "trees" / f"{'6' * 40}.json").write_text(json.dumps({"format_version": 1, "files": listing}))
    assert 6000 in fetch.missing_revisions("EleutherAI/pythia-14m", steps)
    # another template names other revisions; another cache folder holds nothing
    assert fetch.missing_revisions("EleutherAI/pythia-14m", [0], "checkpoint-{step}") == [0]
    assert snap.is_dir()


def test_cache_location_follows_the_environment(hf_env, monkeypatch, tmp_path):
    assert fetch.cache_location() == str(hf_env)
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "elsewhere"))
    assert fetch.cache_location() == str(tmp_path / "elsewhere" / "hub")
    _put(tmp_path / "elsewhere" / "hub" / "models--a--b", "step0", {"config.json": b"{}", "model.safetensors": b"0"})
    assert fetch.missing_revisions("a/b", [0, 1]) == [1]


# -- the command against a fake hub -----------------------------------------------------------------------------------


def test_fetch_downloads_what_from_pretrained_needs_then_nothing_and_loads_offline(
    hf_env, revisions, capsys, monkeypatch
):
    with FakeHub(REPO, revisions) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0:10:10")
        assert code == 0, err
        assert "fetched step0" in err and "fetched step10" in err
        assert "fetched 2 of 2 missing revisions" in out
        assert f"HF_HUB_OFFLINE=1 memtui extract PANEL --model {REPO} --checkpoints 0,10" in out
        downloads = {r.path.rsplit("/", 1)[-1] for r in hub.requests if r.method == "GET" and "/resolve/" in r.path}
        assert downloads == {"config.json", "generation_config.json", "model.safetensors"}
        for rev in ("step0", "step10"):
            snap = snapshot(hf_env, rev)
            assert sorted(p.name for p in snap.iterdir()) == sorted(downloads)
            assert (snap / "model.safetensors").read_bytes() == revisions[rev]["model.safetensors"]
        assert fetch.missing_revisions(REPO, [0, 10]) == []

        # the second run asks the hub nothing at all
        seen = len(hub.requests)
        code, out, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0,10")
        assert code == 0 and len(hub.requests) == seen
        assert "2 already in the cache" in err and "nothing to fetch" in out

    # the hub is gone: the compute-node path loads from the cache alone
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = Source.open(REPO)
    for step in (0, 10):
        assert weights_hash(source.load(step)) == weights_hash(tiny_model(seed=step))
    with pytest.raises(MemtuiError, match="HF_HUB_OFFLINE"):
        source.load(20)


def test_progress_line_on_a_terminal(hf_env, revisions, capsys, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    with FakeHub(REPO, revisions) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setattr("sys.stderr", term)
        code, _, _ = run_fetch(capsys, "--model", REPO, "--checkpoints", "0,10", "--workers", "2")
    assert code == 0
    # the bytes counted are those received: both revisions share config.json and generation_config.json, whose blob
    # the cache stores once
    blobs = {revisions[r][f] for r in revisions for f in fetch.choose_files(list(revisions[r]))}
    assert len(blobs) == 4
    final = term.getvalue().split("\r")[-1]
    assert final == f"fetched 2/2 revisions, {human_decimal(sum(map(len, blobs)))}\x1b[K\n"


def test_interrupted_download_resumes_with_a_range_request(hf_env, revisions, capsys, monkeypatch):
    # huggingface_hub keeps what a cut stream delivered in whole chunks of DOWNLOAD_CHUNK_SIZE (10 MB): make the chunks
    # small so this 97 KB file is cut after some of them, as a GB-size weights file would be
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1024)
    with FakeHub(REPO, revisions, drop_once={"model.safetensors"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0")
    assert code == 0, err
    weights = revisions["step0"]["model.safetensors"]
    gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith("/model.safetensors")]
    assert len(gets) == 2 and gets[0].range is None
    kept = len(weights) // 2 // 1024 * 1024
    assert gets[1].range == f"bytes={kept}-"  # the second asks only for the rest
    assert (snapshot(hf_env, "step0") / "model.safetensors").read_bytes() == weights
    assert "Trying to resume" not in err  # huggingface_hub's own multi-line warnings stay out of the output
    assert not list(hf_env.rglob("*.incomplete"))


def test_a_failed_run_resumes_file_by_file(hf_env, revisions, capsys, monkeypatch):
    with FakeHub(REPO, revisions, refuse_once={"model.safetensors": 503}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, _, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0")
        assert code == 2 and "memtui: step0: the hub answered HTTP 503; rerun to resume" in err
        assert fetch.missing_revisions(REPO, [0]) == [0]
        seen = len(hub.requests)
        code, _, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0")
        assert code == 0, err
        again = [r.path.rsplit("/", 1)[-1] for r in hub.requests[seen:] if "/resolve/" in r.path]
    assert again == ["model.safetensors", "model.safetensors"]  # HEAD and GET: the configs stayed cached
    assert fetch.missing_revisions(REPO, [0]) == []


def test_sizes_read_like_a_person_writes_them():
    assert [human_decimal(n) for n in (0, 999, 1000, 3_400_000_000, 2_500_000_000_000)] == [
        "0 B",
        "999 B",
        "1.0 KB",
        "3.4 GB",
        "2.5 TB",
    ]
    assert fetch.checkpoint_spec([0, 1000, 2000, 3000]) == "0:3000:1000"
    assert fetch.checkpoint_spec([0, 1000, 3000]) == "0,1000,3000"


def test_rate_limiting(hf_env, revisions, capsys, monkeypatch):
    with FakeHub(REPO, revisions, refuse_once={"model.safetensors": 429}, fail={"step10": 429}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, _, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0,10")
    # a download answered 429 once is retried by huggingface_hub itself; a revision refused for good is one line
    assert len([r for r in hub.requests if r.method == "GET" and r.path.endswith("/model.safetensors")]) == 2
    assert fetch.missing_revisions(REPO, [0, 10]) == [10]
    assert code == 2
    assert "memtui: step10: the hub is rate-limiting this node (HTTP 429); wait, then rerun with fewer --workers" in err


def test_a_revision_that_is_not_a_checkpoint_is_one_line(hf_env, revisions, capsys, monkeypatch):
    junk = {"step0": {"optimizer.pt": b"state"}, "step10": {"config.json": revisions["step10"]["config.json"]}}
    with FakeHub(REPO, junk) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, _, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0,10")
        assert not [r for r in hub.requests if "/resolve/" in r.path]
    assert code == 2
    assert "memtui: step0: no config.json in this revision; it is not a transformers checkpoint\n" in err
    assert "memtui: step10: no weights from_pretrained reads in this revision (model*.safetensors" in err


def test_a_full_disk_is_one_line(hf_env, revisions, capsys, monkeypatch):
    import huggingface_hub.file_download as file_download

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(file_download, "http_get", no_space)
    with FakeHub(REPO, revisions) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, _, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0")
    assert code == 2
    assert f"memtui: step0: disk full in {hf_env}; free space or point HF_HUB_CACHE elsewhere, then rerun" in err


def test_a_server_that_is_not_a_hub_is_one_line(hf_env, revisions, capsys, monkeypatch):
    with FakeHub(REPO, revisions) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        real = hub.resolve

        def no_commit_header(h, revision, name, head):
            if head:  # a proxy that strips the hub's headers
                return hub.send(h, 200, revisions["step0"][name], head, {"ETag": '"x"'})
            return real(h, revision, name, head)

        monkeypatch.setattr(hub, "resolve", no_commit_header)
        code, _, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0")
    assert code == 2
    assert f"memtui: step0: {hub.url} does not answer like the Hugging Face hub" in err


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-c raises KeyboardInterrupt, as in a terminal. A shell's background job (`make test &`, some CI runners)
    starts Python with SIGINT ignored, and then `_thread.interrupt_main` does nothing at all."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_the_downloads_and_leaves_no_partial_file(hf_env, revisions, capsys, monkeypatch, ctrl_c_raises):
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1024)
    with FakeHub(REPO, revisions, slow=0.02) as hub:  # about 2 s per weights file
        monkeypatch.setenv("HF_ENDPOINT", hub.url)

        def weights_requested() -> int:
            return sum(r.method == "GET" and r.path.endswith("/model.safetensors") for r in hub.requests)

        ended = threading.Event()  # the fetch returned: a late interrupt would hit whatever pytest runs next
        fired = []  # the SIGINT handler in force when the interrupt was sent

        def interrupt_once_downloading():
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not ended.is_set():
                if weights_requested() >= 2:  # both revisions' weights under way (>=: a retry counts again)
                    time.sleep(0.2)
                    if not ended.is_set():
                        fired.append(signal.getsignal(signal.SIGINT))
                        _thread.interrupt_main()  # what ctrl-c does
                    return
                time.sleep(0.01)

        interrupter = threading.Thread(target=interrupt_once_downloading)
        interrupter.start()
        try:
            code, out, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0,10", "--workers", "2")
        finally:
            ended.set()
        # the CLI turns ctrl-c into exit 130 and one line; if the fetch ended before the interrupt, say how
        assert fired, f"the fetch ended first (exit {code}; {weights_requested()} weights requests): {err[-400:]!r}"
        assert code == 130 and err.rstrip().endswith("memtui: interrupted"), err[-400:]
        interrupter.join()
        assert not [t for t in threading.enumerate() if t.name.startswith("memtui-fetch")]
    # stopped before either weights file was complete: nothing partial left, both revisions still missing
    assert not list(hf_env.rglob("*.incomplete"))
    assert fetch.missing_revisions(REPO, [0, 10]) == [0, 10]


def test_failed_revisions_are_one_line_each_and_the_others_are_fetched(hf_env, revisions, capsys, monkeypatch):
    with FakeHub(REPO, revisions, fail={"step10": 401}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0,10,20")
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("memtui: ")]
    assert lines[0].startswith("memtui: step10: ") and "HTTP 401" in lines[0] and "HF_TOKEN" in lines[0]
    assert lines[1] == f"memtui: step20: no such revision in {REPO}"
    assert lines[2] == "memtui: 2 revisions failed; rerun the same command to resume"
    assert "Traceback" not in err and "http" not in "".join(lines)
    assert "fetched 1 of 3 missing revisions" in out and "on compute nodes" not in out
    assert fetch.missing_revisions(REPO, [0, 10, 20]) == [10, 20]


def test_hf_token_is_sent(hf_env, revisions, capsys, monkeypatch):
    with FakeHub(REPO, revisions, token="hf_secret") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, _, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0")
        assert code == 2 and "memtui: step0: " in err and "HTTP 401" in err
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
        code, _, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0")
        assert code == 0, err
    assert fetch.missing_revisions(REPO, [0]) == []


def test_network_down_is_one_line(hf_env, capsys, monkeypatch):
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    code, _, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0,10")
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("memtui: ")]
    assert lines[:2] == [
        f"memtui: step{s}: cannot reach the hub at http://127.0.0.1:{port} (network down, proxy or firewall?); "
        "rerun to resume"
        for s in (0, 10)
    ]


def test_dry_run_lists_sizes_and_downloads_nothing(hf_env, revisions, capsys, monkeypatch):
    with FakeHub(REPO, revisions) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0,10,20", "--dry-run")
        assert not [r for r in hub.requests if "/resolve/" in r.path]
    assert code == 2  # step20 does not exist
    size = sum(len(revisions["step0"][f]) for f in ("config.json", "generation_config.json", "model.safetensors"))
    assert f"step0: missing, 3 files, {human_decimal(size)}" in out
    assert "dry run: 3 of 3 revisions missing" in out
    assert "memtui: step20: no such revision" in err
    assert fetch.missing_revisions(REPO, [0, 10]) == [0, 10]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--checkpoints", "all"], "fetch has no panel"),
        (["--checkpoints", "0", "--revision-template", "step{stp}"], "cannot use revision template"),
        (["--checkpoints", "0", "--workers", "0"], "--workers must be at least 1"),
        (["--checkpoints", "x"], "cannot read checkpoints"),
    ],
)
def test_bad_arguments_are_one_line(hf_env, capsys, argv, message):
    code, _, err = run_fetch(capsys, "--model", REPO, *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_refuses_a_local_folder_and_offline_mode(hf_env, tmp_path, capsys, monkeypatch):
    code, _, err = run_fetch(capsys, "--model", tmp_path, "--checkpoints", "0")
    assert code == 2 and "is a local path: there is nothing to fetch" in err
    code, _, err = run_fetch(capsys, "--model", "not a repo!", "--checkpoints", "0")
    assert err == "memtui: not a repo! is not a Hugging Face repo id (ORG/NAME, e.g. EleutherAI/pythia-160m).\n"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = run_fetch(capsys, "--model", REPO, "--checkpoints", "0")
    assert code == 2 and "HF_HUB_OFFLINE is set" in err
