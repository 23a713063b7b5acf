"""Bundle archives are bounded while they stream in: every tar header, every byte.

The archives are built here with tarfile (no opa binary): a bundle needs only its module to
load, and every refusal tested happens while the archive is read, before any signature
could be checked.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import tracemalloc
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.policy._bundle import BundleError, BundlePoller, read_bundle

WASM: Final = b"\0asm\x01\0\0\0"
#: The member limit the loader applies when given none.
DEFAULT_MEMBERS: Final = 10_000


def _regular(name: str, content: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(content)
    return info, content


def _kind(name: str, kind: bytes, **fields: object) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in fields.items():
        setattr(info, key, value)
    return info, b""


def _directories(count: int) -> Iterator[tuple[tarfile.TarInfo, bytes]]:
    for n in range(count):
        yield _kind(f"d{n}", tarfile.DIRTYPE)


def _archive(
    members: Iterable[tuple[tarfile.TarInfo, bytes]],
    *,
    fmt: int = tarfile.PAX_FORMAT,
    compress: bool = True,
) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if compress else "w", format=fmt) as tar:
        for info, content in members:
            tar.addfile(info, io.BytesIO(content) if info.isreg() else None)
    return buffer.getvalue()


def _gzip(chunks: Iterable[bytes]) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    out = [compressor.compress(chunk) for chunk in chunks]
    out.append(compressor.flush())
    return b"".join(out)


def _padding(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


def _repeated(byte: bytes, size: int) -> Iterator[bytes]:
    step = 1 << 20
    while size > 0:
        yield byte * min(step, size)
        size -= step


def _peak_mib(action: Callable[[], object]) -> float:
    tracemalloc.start()
    try:
        action()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak / (1 << 20)


@pytest.fixture(scope="module")
def flood() -> bytes:
    """A loadable bundle behind one directory header more than the default member limit."""
    return _archive([*_directories(DEFAULT_MEMBERS + 1), _regular("policy.wasm", WASM)])


# -- every header counts --------------------------------------------------------------------


def test_a_bundle_within_its_limits_loads() -> None:
    members = [*_directories(3), _regular("policy.wasm", WASM), _regular("a/data.json", b"{}")]
    bundle = read_bundle(_archive(members), max_members=5, max_bytes=len(WASM) + 2)
    assert bundle.wasm == WASM


def test_directory_headers_past_the_default_limit_are_refused(flood: bytes) -> None:
    with pytest.raises(BundleError, match="more members than the limit"):
        read_bundle(flood)


def test_directory_headers_past_a_lower_limit_are_refused() -> None:
    raw = _archive([*_directories(60), _regular("policy.wasm", WASM)])
    with pytest.raises(BundleError, match="more members than the limit"):
        read_bundle(raw, max_members=50)


def test_the_archive_is_not_read_past_the_member_limit() -> None:
    # Past the directory over the limit the stream is garbage: a loader that read on
    # would stop on it (and find no module), not on the limit.
    headers = _archive(_directories(51), compress=False)
    end = 51 * tarfile.BLOCKSIZE
    assert headers[end : end + tarfile.BLOCKSIZE] == b"\0" * tarfile.BLOCKSIZE
    raw = gzip.compress(headers[:end] + b"\xff" * (64 * tarfile.BLOCKSIZE))
    with pytest.raises(BundleError, match="more members than the limit"):
        read_bundle(raw, max_members=50)


def test_extension_headers_count_as_members() -> None:
    # A name longer than 100 bytes is carried by a pax header before the member's own.
    members = [_regular("policy.wasm", WASM), _regular("x" * 120 + "/data.json", b"{}")]
    raw = _archive(members)
    assert read_bundle(raw, max_members=3).wasm == WASM
    with pytest.raises(BundleError, match="more members than the limit"):
        read_bundle(raw, max_members=2)


def test_the_poller_refuses_a_flood_of_headers_before_activating(
    flood: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    activated: list[object] = []
    poller = BundlePoller("http://bundles.invalid/b.tar.gz", activate=activated.append)
    monkeypatch.setattr(poller, "_download", lambda: (200, flood, '"e1"'))

    result = poller.poll()

    assert result.outcome == "failed"
    assert result.error is not None
    assert "more members than the limit" in str(result.error)
    assert activated == []
    assert poller.etag is None


def test_a_bundle_directory_counts_its_directories(tmp_path: Path) -> None:
    (tmp_path / "policy.wasm").write_bytes(WASM)
    for n in range(6):
        (tmp_path / f"d{n}").mkdir()
    assert read_bundle(tmp_path, max_members=7).wasm == WASM
    with pytest.raises(BundleError, match="more members than the limit"):
        read_bundle(tmp_path, max_members=6)


def test_a_bundle_directory_holding_a_link_to_a_directory_is_refused(tmp_path: Path) -> None:
    bundle, elsewhere = tmp_path / "bundle", tmp_path / "elsewhere"
    bundle.mkdir()
    elsewhere.mkdir()
    (bundle / "policy.wasm").write_bytes(WASM)
    (elsewhere / "data.json").write_text('{"x": 1}')
    (bundle / "linked").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(BundleError, match="other than regular files"):
        read_bundle(bundle)


_ENTRY = st.tuples(st.sampled_from(["dir", "file"]), st.booleans())


@given(entries=st.lists(_ENTRY, max_size=12), limit=st.integers(1, 20))
def test_an_archive_loads_exactly_when_its_headers_fit_the_limit(
    entries: list[tuple[str, bool]], limit: int
) -> None:
    # Each entry is one header, and one more (pax) when its name is long.
    members = [_regular("policy.wasm", WASM)]
    headers = 1
    for n, (kind, long_name) in enumerate(entries):
        name = ("y" * 110 if long_name else "e") + str(n)
        members.append(
            _kind(name, tarfile.DIRTYPE) if kind == "dir" else _regular(name + ".bin", b"1")
        )
        headers += 2 if long_name else 1
    raw = _archive(members)
    if headers <= limit:
        assert read_bundle(raw, max_members=limit).wasm == WASM
    else:
        with pytest.raises(BundleError, match="more members than the limit"):
            read_bundle(raw, max_members=limit)


# -- only regular files and directories ----------------------------------------------------


@pytest.mark.parametrize(
    ("member", "fmt"),
    [
        (_kind("link", tarfile.SYMTYPE, linkname="/etc/passwd"), tarfile.PAX_FORMAT),
        (_kind("hard", tarfile.LNKTYPE, linkname="policy.wasm"), tarfile.PAX_FORMAT),
        (_kind("device", tarfile.CHRTYPE), tarfile.PAX_FORMAT),
        (_kind("fifo", tarfile.FIFOTYPE), tarfile.PAX_FORMAT),
        (_kind("sparse", tarfile.GNUTYPE_SPARSE), tarfile.GNU_FORMAT),
        (_kind("unknown", b"Z"), tarfile.PAX_FORMAT),
    ],
    ids=["symlink", "hardlink", "device", "fifo", "sparse", "unknown"],
)
def test_members_other_than_files_and_directories_are_refused(
    member: tuple[tarfile.TarInfo, bytes], fmt: int
) -> None:
    raw = _archive([*_directories(2), member, _regular("policy.wasm", WASM)], fmt=fmt)
    with pytest.raises(BundleError, match="other than regular files"):
        read_bundle(raw)


def test_a_symlink_is_refused_before_what_follows_it_is_read() -> None:
    link = _archive([_kind("link", tarfile.SYMTYPE, linkname="policy.wasm")], compress=False)
    raw = gzip.compress(link[: tarfile.BLOCKSIZE] + b"\xff" * tarfile.RECORDSIZE)
    with pytest.raises(BundleError, match="other than regular files"):
        read_bundle(raw)


def test_a_global_pax_header_is_refused() -> None:
    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT, pax_headers={"comment": "x"}
    ) as tar:
        info, content = _regular("policy.wasm", WASM)
        tar.addfile(info, io.BytesIO(content))
    with pytest.raises(BundleError, match="other than regular files"):
        read_bundle(buffer.getvalue())


def test_a_name_that_is_not_utf8_is_refused_as_unsafe() -> None:
    info = tarfile.TarInfo("\udcff/data.json")
    info.size = 2
    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer, mode="w:gz", format=tarfile.USTAR_FORMAT, errors="surrogateescape"
    ) as tar:
        tar.addfile(info, io.BytesIO(b"{}"))
        wasm, content = _regular("policy.wasm", WASM)
        tar.addfile(wasm, io.BytesIO(content))
    with pytest.raises(BundleError, match="unsafe name"):
        read_bundle(buffer.getvalue())


# -- bombs ----------------------------------------------------------------------------------

BOMB: Final = 24 << 20


def _extension_bomb(kind: bytes, size: int) -> bytes:
    # One extension header announcing `size` bytes of data (a pax comment, a GNU long
    # name), then a bundle: a loader that reads the data holds it all in memory.
    if kind == tarfile.XHDTYPE:
        body = size - len(" comment=\n") - 8
        record = f"{8 + len(' comment=') + body + 1} comment=".encode()
        assert len(record) == 8 + len(" comment=")
        head, tail = record, b"\n"
    else:
        body, head, tail = size, b"", b""
    header = tarfile.TarInfo("././@Extension")
    header.type = kind
    header.size = size
    wasm = _archive([_regular("policy.wasm", WASM)], compress=False)
    return _gzip(
        [
            header.tobuf(format=tarfile.GNU_FORMAT),
            head,
            *_repeated(b"a", body),
            tail,
            _padding(size),
            wasm,
        ]
    )


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME], ids=["pax", "gnu"])
def test_an_extension_header_bomb_is_refused_without_inflating_it(kind: bytes) -> None:
    raw = _extension_bomb(kind, BOMB)
    assert len(raw) < BOMB // 500

    def refused() -> None:
        with pytest.raises(BundleError, match="malformed tar extension header"):
            read_bundle(raw, max_bytes=1 << 20)

    assert _peak_mib(refused) < 4


def test_extension_data_counts_towards_the_size_limit() -> None:
    raw = _archive([_regular("policy.wasm", WASM), _regular("z" * 300 + ".bin", b"")])
    assert read_bundle(raw, max_bytes=len(WASM) + 400).wasm == WASM
    with pytest.raises(BundleError, match="larger than the limit"):
        read_bundle(raw, max_bytes=len(WASM) + 100)


def test_a_chain_of_extension_headers_is_refused_as_a_bundle_error() -> None:
    record = b"12 comment=\n"
    header = tarfile.TarInfo("././@PaxHeader")
    header.type = tarfile.XHDTYPE
    header.size = len(record)
    one = header.tobuf(format=tarfile.GNU_FORMAT) + record + _padding(len(record))
    wasm = _archive([_regular("policy.wasm", WASM)], compress=False)
    with pytest.raises(BundleError, match="malformed tar extension header"):
        read_bundle(_gzip([one * 2000, wasm]))


def test_a_member_announcing_more_than_the_limit_is_refused_before_it_is_read() -> None:
    header = tarfile.TarInfo("policy.wasm")
    header.size = BOMB
    raw = _gzip([header.tobuf(format=tarfile.USTAR_FORMAT), *_repeated(b"\0", BOMB)])

    def refused() -> None:
        with pytest.raises(BundleError, match="larger than the limit"):
            read_bundle(raw, max_bytes=1 << 20)

    assert _peak_mib(refused) < 4


def test_the_decompressed_stream_stops_just_past_its_bound() -> None:
    from gateway.policy._bundle import _Inflating

    stream = _Inflating(_gzip(_repeated(b"\0", BOMB)), 1 << 20)
    sizes: list[int] = []

    def drain() -> None:
        while chunk := stream.read(tarfile.RECORDSIZE):
            sizes.append(len(chunk))

    with pytest.raises(BundleError, match="larger than the limit"):
        drain()
    assert (1 << 20) - tarfile.RECORDSIZE <= sum(sizes) <= 1 << 20
    assert stream.tell() <= (1 << 20) + tarfile.RECORDSIZE
