"""`zerotune probe` input errors: one line, exit 2, before anything is measured."""

from __future__ import annotations


def test_existing_out_without_force(cli, tmp_path) -> None:
    out = tmp_path / "p.yaml"
    out.write_text("keep me")
    result = cli("probe", "--out", str(out))
    assert result.code == 2
    assert "already exists" in result.stderr and "--force" in result.stderr
    assert "Traceback" not in result.stderr
    assert out.read_text() == "keep me"


def test_bad_numbers(cli) -> None:
    for args, text in ((("--timeout", "0"), "--timeout"), (("--nproc", "0"), "--nproc")):
        result = cli("probe", *args)
        assert result.code == 2 and text in result.stderr


def test_distributed_needs_torchrun(cli, monkeypatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    result = cli("probe", "--distributed")
    assert result.code == 2 and "torchrun" in result.stderr


def test_unknown_model(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ZEROTUNE_CACHE_DIR", str(tmp_path))
    result = cli("probe", "--model", "no-such-model-xyz", "--quick")
    assert result.code == 2 and "no-such-model-xyz" in result.stderr
    assert not (tmp_path / "last-probe.yaml").exists()
