"""The staged transfer of a model to a GPU machine (``benchmarks/gpu/make_stage.py`` and
``benchmarks/gpu/stage.py``) on a tiny random BERT: cut into chunks, each received in turn
(moved out of a fake repository's ``.gpu-stage``), assembled, checked and loaded with the
same hidden states; and each refusal (a damaged chunk, a missing one, one of another
manifest, a wrong whole checksum, an unsafe archive member, hidden states that disagree)
with its reason, leaving the carried files as they were. The real all-mpnet-base-v2, where
``make mpnet`` installed it, takes the same route (slow)."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import re
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
import make_stage  # noqa: E402
import stage  # noqa: E402

WORDS = ["the", "cat", "sat", "on", "mat", "a", "man", "is", "playing", "guitar", "."]
TINY_TASKS = {"MRPC": ("train.tsv", "dev.tsv"), "CoLA": ("train.tsv",)}
SENTENCES = ("the cat sat on the mat .", "a man is playing a guitar .")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A random 2-layer BERT with its tokenizer, saved with ``save_pretrained``; the staged
    model's files and their CPU reference; a tiny GLUE folder."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    root = tmp_path_factory.mktemp("tiny")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(WORDS) + 5, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    model_dir = root / "model"
    BertModel(config).save_pretrained(model_dir)
    BertTokenizer(vocab_file=str(vocab)).save_pretrained(model_dir)
    glue = root / "glue"
    for task, files in TINY_TASKS.items():
        (glue / task).mkdir(parents=True)
        for f in files:
            (glue / task / f).write_text(f"{task} {f}\tthe cat sat\t1\n")
    files = make_stage.model_files(model_dir)
    return {"files": files, "glue": glue, "ref": make_stage.reference(files, SENTENCES)}


def _made(tmp: Path, tiny: dict, chunk: int = 4000, xz: int | None = None,
          archive: bytes | None = None, ref: dict | None = None) -> tuple[Path, dict]:
    """A stage written by make_stage into ``tmp/made``: its folder and manifest."""
    if archive is None:
        archive = make_stage.build_archive(tiny["files"], tiny["glue"], TINY_TASKS, xz)
    out = tmp / "made"
    return out, make_stage.write_stage(out, archive, chunk, ref or tiny["ref"], {})


def _carry(made: Path, repo: Path, *names: str) -> Path:
    """What a GPU call receives: ``repo/.gpu-stage`` with the manifest and ``names``."""
    carried = repo / ".gpu-stage"
    carried.mkdir(parents=True, exist_ok=True)
    for name in (stage.MANIFEST, *names):
        shutil.copyfile(made / name, carried / name)
    return carried


def _receive_all(made: Path, manifest: dict, repo: Path, stage_root: Path) -> Path:
    folder = None
    for c in manifest["chunks"]:
        folder, moved, _, _ = stage.receive(_carry(made, repo, c["name"]), stage_root)
        assert [m.name for m in moved] == [c["name"]]
    return folder


@pytest.mark.timeout(120)
def test_the_whole_route(tmp_path: Path, tiny: dict, capsys: pytest.CaptureFixture) -> None:
    import torch
    from transformers import AutoModel

    made, manifest = _made(tmp_path, tiny, xz=0)
    sizes = [c["size"] for c in manifest["chunks"]]
    assert len(sizes) >= 3 and max(sizes) <= 4000 and max(sizes) - min(sizes) <= 1
    repo, stage_root = tmp_path / "repo", tmp_path / "cache" / "stage"
    for i, c in enumerate(manifest["chunks"][:-1]):
        carried = _carry(made, repo, c["name"])
        assert stage.main(["receive", "--from", str(carried), "--stage", str(stage_root)]) == 0
        said = capsys.readouterr().out
        assert f"have {i + 1} of {len(sizes)}" in said and "missing" in said
        assert not (carried / c["name"]).exists()  # moved out of the repository
        assert (carried / stage.MANIFEST).is_file()  # the manifest stays where it came
    last = manifest["chunks"][-1]["name"]
    carried = _carry(made, repo, last)
    assert stage.main(["assemble", "--from", str(carried), "--stage", str(stage_root),
                       "--device", "cpu"]) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    # the same CPU: only the manifest's rounding to 8 significant digits differs
    worst = float(re.search(r"match the CPU's: largest \|diff\| (\S+)", said).group(1))
    assert worst < 1e-6, said
    assert not (carried / last).exists()
    ready = stage_root / stage.READY
    folder = stage.stage_folder(stage_root, manifest)
    assert ready.resolve() == (folder / "unpacked").resolve()
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [*(c["name"] for c in manifest["chunks"]), stage.MANIFEST, "unpacked"])  # no work left
    got = ready / make_stage.MODEL_DIR
    assert {n: (got / n).read_bytes() for n in tiny["files"]} == tiny["files"]
    assert (ready / "glue_data" / "CoLA" / "train.tsv").read_bytes() == (
        tiny["glue"] / "CoLA" / "train.tsv").read_bytes()
    # the unpacked folder loads as the float16-rounded weights, in float32
    model = AutoModel.from_pretrained(str(got), dtype=torch.float32)
    assert model.dtype == torch.float32
    emb = model.embeddings.word_embeddings.weight
    assert torch.equal(emb, emb.half().float())
    # a second assemble (the chunks all there) unpacks the same archive again
    assert stage.main(["assemble", "--from", str(carried), "--stage", str(stage_root),
                       "--device", "cpu"]) == 0


def test_split_cuts_equal_chunks() -> None:
    data = bytes(range(256)) * 40
    for limit in (1, 7, 1000, len(data), len(data) + 5):
        parts = make_stage.split(data, limit)
        assert b"".join(parts) == data and max(map(len, parts)) <= limit
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
        assert len(parts) == -(-len(data) // limit)
    with pytest.raises(ValueError, match="at least one byte"):
        make_stage.split(data, 0)


def test_a_damaged_chunk_is_refused_and_left_in_place(tmp_path: Path, tiny: dict) -> None:
    made, manifest = _made(tmp_path, tiny)
    carried = _carry(made, tmp_path / "repo", "part-002")
    data = bytearray((carried / "part-002").read_bytes())
    data[10] ^= 1
    (carried / "part-002").write_bytes(bytes(data))
    with pytest.raises(stage.StageError, match=r"part-002 has SHA-256 .*\(damaged"):
        stage.receive(carried, tmp_path / "stage")
    assert (carried / "part-002").read_bytes() == bytes(data)  # neither moved nor deleted
    (carried / "part-002").write_bytes(bytes(data[:-1]))
    with pytest.raises(stage.StageError, match=r"part-002 has \d+ bytes, the manifest says"):
        stage.receive(carried, tmp_path / "stage")


def test_a_missing_chunk_stops_assemble(tmp_path: Path, tiny: dict,
                                        capsys: pytest.CaptureFixture) -> None:
    made, manifest = _made(tmp_path, tiny)
    repo, stage_root = tmp_path / "repo", tmp_path / "stage"
    names = [c["name"] for c in manifest["chunks"]]
    for name in names[:1] + names[2:]:
        stage.receive(_carry(made, repo, name), stage_root)
    carried = repo / ".gpu-stage"
    assert stage.main(["assemble", "--from", str(carried), "--stage", str(stage_root)]) == 1
    out = capsys.readouterr()
    assert "missing part-002" in out.out
    assert f"lacks part-002 of {len(names)} chunks" in out.err and "Traceback" not in out.err
    # a receive call that carries no chunk says so
    assert stage.main(["receive", "--from", str(carried), "--stage", str(stage_root)]) == 1
    assert "no chunk of the manifest was carried" in capsys.readouterr().err


def test_a_chunk_of_another_manifest_is_refused(tmp_path: Path, tiny: dict) -> None:
    made, manifest = _made(tmp_path, tiny)
    other = tmp_path / "other"
    other_glue = tmp_path / "glue2"
    shutil.copytree(tiny["glue"], other_glue)
    (other_glue / "MRPC" / "dev.tsv").write_text("another\tfile\t0\n")
    archive = make_stage.build_archive(tiny["files"], other_glue, TINY_TASKS, None)
    _, theirs = _made(other, tiny, archive=archive)
    carried = _carry(made, tmp_path / "repo")
    pairs = zip(manifest["chunks"], theirs["chunks"], strict=False)
    ours, theirs = next((a, b) for a, b in pairs if a["sha256"] != b["sha256"])
    assert ours["name"] == theirs["name"]
    shutil.copyfile(other / "made" / ours["name"], carried / ours["name"])
    with pytest.raises(stage.StageError, match=f"{ours['name']} .*from another manifest"):
        stage.receive(carried, tmp_path / "stage")
    assert (carried / ours["name"]).is_file()


def test_a_wrong_whole_checksum_is_refused(tmp_path: Path, tiny: dict) -> None:
    made, manifest = _made(tmp_path, tiny)
    wrong = copy.deepcopy(manifest)
    wrong["archive"]["sha256"] = hashlib.sha256(b"not the archive").hexdigest()
    (made / stage.MANIFEST).write_text(json.dumps(wrong))
    folder = _receive_all(made, wrong, tmp_path / "repo", tmp_path / "stage")
    with pytest.raises(stage.StageError, match="the joined chunks have SHA-256"):
        stage.join_and_unpack(folder, wrong)
    assert not (folder / "unpacked").exists()
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []  # no work left


def _tar(members: list[tarfile.TarInfo], data: bytes = b"x") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for m in members:
            tar.addfile(m, io.BytesIO(data) if m.isfile() else None)
    return buf.getvalue()


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 1
    return info


@pytest.mark.parametrize("bad", ["../evil", "/abs/evil", "mpnet-fp16/../../evil", "elsewhere/f",
                                 "link"])
def test_an_unsafe_member_is_refused(tmp_path: Path, tiny: dict, bad: str) -> None:
    if bad == "link":
        member = tarfile.TarInfo("mpnet-fp16/link")
        member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
    else:
        member = _file(bad)
    archive = _tar([_file("mpnet-fp16/config.json"), member])
    made, manifest = _made(tmp_path, tiny, archive=archive)
    folder = _receive_all(made, manifest, tmp_path / "repo", tmp_path / "stage")
    with pytest.raises(stage.StageError, match="refused"):
        stage.join_and_unpack(folder, manifest)
    assert not (tmp_path / "evil").exists() and not (tmp_path / "stage" / "evil").exists()
    assert not (folder / "unpacked").exists()


def test_hidden_states_that_disagree_are_refused(tmp_path: Path, tiny: dict,
                                                 capsys: pytest.CaptureFixture) -> None:
    ref = copy.deepcopy(tiny["ref"])
    layer = str(ref["layers"][-1])
    ref["mean"][layer][1][3] += 0.01
    made, manifest = _made(tmp_path, tiny, ref=ref)
    repo, stage_root = tmp_path / "repo", tmp_path / "stage"
    _receive_all(made, manifest, repo, stage_root)
    assert stage.main(["assemble", "--from", str(repo / ".gpu-stage"), "--stage",
                       str(stage_root), "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert f"hidden states disagree with the CPU's: layer {layer}, sentence 1, mean[3]" in err
    assert "Traceback" not in err and not (stage_root / stage.READY).exists()
    # within the tolerance they agree
    assert stage.compare_states(tiny["ref"], {**tiny["ref"], "atol": 0.0, "rtol": 0.0}) == 0.0


def test_bad_manifests_and_places_are_refused(tmp_path: Path, tiny: dict,
                                              capsys: pytest.CaptureFixture) -> None:
    made, manifest = _made(tmp_path, tiny)
    carried = _carry(made, tmp_path / "repo", "part-001")
    assert stage.main(["receive", "--from", str(carried), "--stage",
                       str(ROOT / ".gpu-stage-cache")]) == 1
    assert "is inside the repository" in capsys.readouterr().err
    assert not (ROOT / ".gpu-stage-cache").exists()
    bad = copy.deepcopy(manifest)
    bad["chunks"][1]["name"] = "../part-002"
    (carried / stage.MANIFEST).write_text(json.dumps(bad))
    with pytest.raises(stage.StageError, match="chunk 2 is not part-002"):
        stage.receive(carried, tmp_path / "stage")
    (carried / stage.MANIFEST).write_text("{")
    with pytest.raises(stage.StageError, match="is not JSON"):
        stage.receive(carried, tmp_path / "stage")
    (carried / stage.MANIFEST).unlink()
    with pytest.raises(stage.StageError, match="no manifest at"):
        stage.receive(carried, tmp_path / "stage")
    assert (carried / "part-001").is_file()


def test_make_stage_replaces_only_its_own_files(tmp_path: Path, tiny: dict) -> None:
    made, manifest = _made(tmp_path, tiny, chunk=1000)
    n = len(manifest["chunks"])
    _, again = _made(tmp_path, tiny, chunk=4000)  # fewer chunks: the old ones go
    assert sorted(p.name for p in made.iterdir()) == sorted(
        [stage.MANIFEST, *(c["name"] for c in again["chunks"])])
    assert len(again["chunks"]) < n
    (made / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="did not write"):
        _made(tmp_path, tiny)
    assert (made / "notes.txt").read_text() == "mine"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_real_mpnet_takes_the_route(tmp_path: Path) -> None:
    from isotropy.models.split_zip import model_path

    try:
        files = make_stage.model_files(Path(model_path()))
    except FileNotFoundError as err:
        pytest.skip(f"needs all-mpnet-base-v2 (make mpnet): {err}")
    glue = tmp_path / "glue"
    (glue / "MRPC").mkdir(parents=True)
    (glue / "MRPC" / "dev.tsv").write_text("x\ty\t1\n")
    archive = make_stage.build_archive(files, glue, {"MRPC": ("dev.tsv",)}, None)
    manifest = make_stage.write_stage(tmp_path / "made", archive, 60 * 2**20,
                                      make_stage.reference(files), {})
    folder = _receive_all(tmp_path / "made", manifest, tmp_path / "repo", tmp_path / "stage")
    unpacked = stage.join_and_unpack(folder, manifest)
    assert stage.verify(unpacked, manifest, "cpu") <= 1e-6


def test_the_same_archive_cut_otherwise_is_staged_apart(tmp_path: Path, tiny: dict) -> None:
    archive = make_stage.build_archive(tiny["files"], tiny["glue"], TINY_TASKS, None)
    made, small = _made(tmp_path / "a", tiny, chunk=3000, archive=archive)
    _, large = _made(tmp_path / "b", tiny, chunk=5000, archive=archive)
    assert small["archive"] == large["archive"]
    root = tmp_path / "stage"
    assert stage.stage_folder(root, small) != stage.stage_folder(root, large)
    # a newer manifest of the same chunks (another reference) replaces the kept copy
    newer = {**copy.deepcopy(small), "made": {"again": True}}
    (made / stage.MANIFEST).write_text(json.dumps(newer))
    folder, *_ = stage.receive(_carry(made, tmp_path / "repo", "part-001"), root)
    assert folder == stage.stage_folder(root, small)
    assert json.loads((folder / stage.MANIFEST).read_text()) == newer


def test_an_archive_that_cannot_be_read_is_refused(tmp_path: Path, tiny: dict) -> None:
    whole = make_stage.build_archive(tiny["files"], tiny["glue"], TINY_TASKS, 0)
    made, manifest = _made(tmp_path, tiny, archive=whole[: len(whole) // 2])  # cut short
    folder = _receive_all(made, manifest, tmp_path / "repo", tmp_path / "stage")
    with pytest.raises(stage.StageError, match="the joined archive cannot be read"):
        stage.join_and_unpack(folder, manifest)
    assert not (folder / "unpacked").exists()
