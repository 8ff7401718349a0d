"""Container sniffing, page counting and page opening on real files made here with Pillow."""

from __future__ import annotations

import io
import os
import struct
import tracemalloc
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline.datamodel import Reason
from pipeline.ingest.containers import ContainerError, Kind, open_page, page_count, page_size, read_document, sniff
from pipeline.masking import redact
from pipeline.settings import PrepareSettings

SETTINGS = PrepareSettings()


def _noise_image(w: int = 400, h: int = 300, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


def _save(img: Image.Image, path: Path, fmt: str, **kw: object) -> Path:
    img.save(path, fmt, **kw)
    return path


def png_header_only(width: int, height: int) -> bytes:
    """A valid PNG signature + IHDR declaring width x height, with a token IDAT: a bomb that costs nothing."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
            + chunk(b"IEND", b""))


def _reason(exc_info: pytest.ExceptionInfo[ContainerError]) -> Reason:
    return exc_info.value.reason


# --- sniffing -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("fmt", "kind"), [("JPEG", Kind.JPEG), ("PNG", Kind.PNG), ("TIFF", Kind.TIFF),
                                           ("BMP", Kind.BMP), ("WEBP", Kind.WEBP), ("PDF", Kind.PDF)])
def test_sniff_reads_magic_not_extension(tmp_path: Path, fmt: str, kind: Kind) -> None:
    path = _save(_noise_image(64, 64), tmp_path / "scan.dat", fmt)
    assert sniff(path) is kind


def test_png_named_jpg_is_opened_as_png(tmp_path: Path) -> None:
    path = _save(_noise_image(80, 60), tmp_path / "scan.jpg", "PNG")
    assert sniff(path) is Kind.PNG
    assert open_page(path, 0, SETTINGS).size == (80, 60)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jpg"
    path.write_bytes(b"")
    with pytest.raises(ContainerError) as e:
        page_count(path)
    assert _reason(e) is Reason.EMPTY_FILE


def test_text_file_named_jpg_is_unsupported(tmp_path: Path) -> None:
    path = tmp_path / "notes.jpg"
    path.write_text("this is not a picture\n")
    for call in (lambda: page_count(path), lambda: open_page(path, 0, SETTINGS)):
        with pytest.raises(ContainerError) as e:
            call()
        assert _reason(e) is Reason.UNSUPPORTED_TYPE


def test_gif_is_unsupported(tmp_path: Path) -> None:
    path = _save(_noise_image(32, 32).convert("P"), tmp_path / "a.gif", "GIF")
    with pytest.raises(ContainerError) as e:
        sniff(path)
    assert _reason(e) is Reason.UNSUPPORTED_TYPE


# --- pages ----------------------------------------------------------------------------------------------

def test_three_page_tiff_counts_and_opens_every_frame(tmp_path: Path) -> None:
    frames = [Image.new("RGB", (100 + 10 * i, 80), color) for i, color in enumerate(["red", "lime", "blue"])]
    path = tmp_path / "stack.tif"
    frames[0].save(path, "TIFF", save_all=True, append_images=frames[1:])
    assert page_count(path) == 3
    for i, expected in enumerate([(255, 0, 0), (0, 255, 0), (0, 0, 255)]):
        page = open_page(path, i, SETTINGS)
        assert page.size == (100 + 10 * i, 80)
        assert page.convert("RGB").getpixel((5, 5)) == expected


def test_two_page_pdf_counts_and_renders_at_dpi(tmp_path: Path) -> None:
    # 300x200 px at 100 dpi = 216x144 pt pages; at 200 dpi they render 600x400.
    pages = [Image.new("RGB", (300, 200), "white"), Image.new("RGB", (200, 300), "black")]
    path = tmp_path / "two.pdf"
    pages[0].save(path, "PDF", save_all=True, append_images=pages[1:], resolution=100.0)
    assert page_count(path) == 2
    first = open_page(path, 0, PrepareSettings(pdf_dpi=200))
    second = open_page(path, 1, PrepareSettings(pdf_dpi=200))
    assert first.size == pytest.approx((600, 400), abs=2)
    assert second.size == pytest.approx((400, 600), abs=2)
    assert np.asarray(second.convert("L")).mean() < 10


def test_single_images_have_one_page(tmp_path: Path) -> None:
    for fmt in ("JPEG", "PNG", "BMP", "WEBP"):
        assert page_count(_save(_noise_image(64, 48), tmp_path / f"x.{fmt.lower()}", fmt)) == 1


def test_page_out_of_range(tmp_path: Path) -> None:
    tiff = _save(_noise_image(64, 48), tmp_path / "one.tif", "TIFF")
    pdf = _save(_noise_image(64, 48), tmp_path / "one.pdf", "PDF")
    for path in (tiff, pdf):
        with pytest.raises(ContainerError) as e:
            open_page(path, 1, SETTINGS)
        assert _reason(e) is Reason.UNREADABLE


# --- broken and hostile files ---------------------------------------------------------------------------

@pytest.mark.timeout(30)
@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_truncated_pixel_data_is_a_decode_error(tmp_path: Path, fmt: str) -> None:
    buf = io.BytesIO()
    _noise_image(600, 400).save(buf, fmt)
    path = tmp_path / f"cut.{fmt.lower()}"
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) * 6 // 10])
    assert page_count(path) == 1  # the header is intact: ingest accepts it
    with pytest.raises(ContainerError) as e:
        open_page(path, 0, SETTINGS)
    assert _reason(e) is Reason.DECODE_ERROR


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_truncated_header_is_unreadable(tmp_path: Path, fmt: str) -> None:
    buf = io.BytesIO()
    _noise_image(64, 64).save(buf, fmt)
    path = tmp_path / f"stub.{fmt.lower()}"
    path.write_bytes(buf.getvalue()[:12])
    with pytest.raises(ContainerError) as e:
        page_count(path)
    assert _reason(e) is Reason.UNREADABLE


def test_corrupt_pdf_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "bad.pdf"
    path.write_bytes(b"%PDF-1.7\n" + b"\x00garbage" * 50)
    with pytest.raises(ContainerError) as e:
        page_count(path)
    assert _reason(e) is Reason.UNREADABLE


@contextmanager
def allocations() -> Iterator[dict[str, int]]:
    """What the block allocates while it runs: the peak of Python and NumPy memory (tracemalloc, current
    allocations only, unlike the process's peak RSS which earlier tests may already have raised) and the image
    blocks Pillow took from its own allocator (which tracemalloc does not see)."""
    def blocks() -> int:
        stats = Image.core.get_stats()
        return stats["allocated_blocks"] + stats["reused_blocks"]

    measured: dict[str, int] = {}
    tracemalloc.start()
    tracemalloc.reset_peak()
    before, blocks_before = tracemalloc.get_traced_memory()[0], blocks()
    try:
        yield measured
    finally:
        measured["python_peak"] = tracemalloc.get_traced_memory()[1] - before
        measured["pillow_blocks"] = blocks() - blocks_before
        tracemalloc.stop()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("width", "height"), [(12_000, 12_000), (100_000, 100_000)])
def test_decompression_bomb_is_rejected_before_decoding(tmp_path: Path, width: int, height: int) -> None:
    # 144 Mpx is over our 120 Mpx cap but under Pillow's own error threshold (our check decides);
    # 10 Gpx trips Pillow's DecompressionBombError first (mapped to the same reason).
    path = tmp_path / "bomb.png"
    path.write_bytes(png_header_only(width, height))
    with allocations() as bomb:
        for call in (lambda: page_count(path), lambda: open_page(path, 0, SETTINGS)):
            with pytest.raises(ContainerError) as e:
                call()
            assert _reason(e) is Reason.TOO_MANY_PIXELS
    assert bomb["pillow_blocks"] == 0 and bomb["python_peak"] < 8 * 1024 * 1024, bomb  # never allocated
    # The same measure does see a page that is decoded (12 MB of pixels here).
    page = _save(_noise_image(2000, 2000), tmp_path / "page.png", "PNG")
    with allocations() as decoded:
        np.asarray(open_page(page, 0, SETTINGS))
    assert decoded["pillow_blocks"] >= 1 and decoded["python_peak"] >= 2000 * 2000 * 3, decoded


def test_pillow_bomb_error_maps_even_when_our_cap_is_higher(tmp_path: Path) -> None:
    path = tmp_path / "bomb.png"
    path.write_bytes(png_header_only(100_000, 100_000))
    with pytest.raises(ContainerError) as e:
        open_page(path, 0, PrepareSettings(max_input_pixels=10**12))
    assert _reason(e) is Reason.TOO_MANY_PIXELS
    # the counts stay readable once details are masked (a bare run of 9+ digits looks like a document number)
    assert "10,000,000,000 pixels" in redact(e.value.detail)


def test_pixel_cap_follows_settings(tmp_path: Path) -> None:
    jpg = _save(_noise_image(200, 200), tmp_path / "a.jpg", "JPEG")
    pdf = _save(_noise_image(200, 200), tmp_path / "a.pdf", "PDF", resolution=72.0)  # 200 pt -> 556 px @200 dpi
    small_cap = PrepareSettings(max_input_pixels=30_000)
    for path in (jpg, pdf):
        with pytest.raises(ContainerError) as e:
            open_page(path, 0, small_cap)
        assert _reason(e) is Reason.TOO_MANY_PIXELS
    assert open_page(jpg, 0, PrepareSettings(max_input_pixels=40_000)).size == (200, 200)


def test_error_carries_reason_and_detail(tmp_path: Path) -> None:
    path = tmp_path / "empty.png"
    path.write_bytes(b"")
    with pytest.raises(ContainerError) as e:
        open_page(path, 0, SETTINGS)
    assert e.value.reason is Reason.EMPTY_FILE
    assert "0 bytes" in e.value.detail
    assert str(e.value).startswith("empty_file")


# --- bytes in, the same answers; only regular files are read --------------------------------------------

def test_bytes_and_path_give_the_same_pages(tmp_path: Path) -> None:
    frames = [Image.new("RGB", (90, 70), c) for c in ("red", "blue")]
    path = tmp_path / "two.tif"
    frames[0].save(path, "TIFF", save_all=True, append_images=frames[1:])
    pdf = _save(_noise_image(64, 48), tmp_path / "one.pdf", "PDF")
    for source in (path, path.read_bytes()):
        assert sniff(source) is Kind.TIFF
        assert page_count(source) == 2
        assert page_size(source, 1, SETTINGS) == (90, 70)
        assert open_page(source, 1, SETTINGS).convert("RGB").getpixel((1, 1)) == (0, 0, 255)
    assert page_count(pdf.read_bytes()) == page_count(pdf) == 1
    assert open_page(pdf.read_bytes(), 0, SETTINGS).size == open_page(pdf, 0, SETTINGS).size


def _tiff_ifds(data: bytes) -> list[tuple[int, int]]:
    """(IFD offset, offset of its next-IFD pointer) for every IFD of a little-endian TIFF."""
    out, ifd = [], struct.unpack("<I", data[4:8])[0]
    while ifd:
        next_at = ifd + 2 + 12 * struct.unpack("<H", data[ifd:ifd + 2])[0]
        out.append((ifd, next_at))
        ifd = struct.unpack("<I", data[next_at:next_at + 4])[0]
    return out


def _three_page_tiff() -> bytearray:
    frames = [Image.new("RGB", (60, 50), c) for c in ("red", "lime", "blue")]
    buf = io.BytesIO()
    frames[0].save(buf, "TIFF", save_all=True, append_images=frames[1:])
    return bytearray(buf.getvalue())


def test_tiff_whose_ifd_chain_points_past_the_end_cannot_be_counted() -> None:
    data = _three_page_tiff()
    _, next_at = _tiff_ifds(bytes(data))[1]
    data[next_at:next_at + 4] = struct.pack("<I", len(data) + 4096)
    with pytest.raises(ContainerError) as e:
        page_count(bytes(data))
    assert _reason(e) is Reason.UNREADABLE
    assert "TIFF pages" in e.value.detail


@pytest.mark.timeout(30)
def test_tiff_whose_ifd_chain_loops_ends() -> None:
    data = _three_page_tiff()
    ifds = _tiff_ifds(bytes(data))
    data[ifds[2][1]:ifds[2][1] + 4] = struct.pack("<I", ifds[1][0])  # last IFD points back to the second
    assert page_count(bytes(data)) == 3


@pytest.mark.timeout(30)
def test_read_document_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "dir").mkdir()
    real = _save(_noise_image(40, 40), tmp_path / "real.png", "PNG")
    os.symlink(real, tmp_path / "link.png")
    for name in ("pipe", "dir"):
        with pytest.raises(ContainerError) as e:
            read_document(tmp_path / name, 1 << 20)  # opening the FIFO would block forever
        assert _reason(e) is Reason.NOT_A_REGULAR_FILE
    assert read_document(tmp_path / "link.png", 1 << 20) == real.read_bytes()
    with pytest.raises(ContainerError) as e:
        read_document(tmp_path / "link.png", 1 << 20, follow_symlinks=False)
    assert _reason(e) is Reason.NOT_A_REGULAR_FILE
    with pytest.raises(ContainerError) as e:
        read_document(real, real.stat().st_size - 1)
    assert _reason(e) is Reason.TOO_LARGE
    with pytest.raises(ContainerError) as e:
        read_document(tmp_path / "gone.png", 1 << 20)
    assert _reason(e) is Reason.CHANGED_DURING_RUN


def _png(im: Image.Image, **options: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG", **options)
    return buf.getvalue()


def test_a_plain_png_is_decoded_by_opencv_into_the_pixels_pillow_gives() -> None:
    """Grey and RGB, 8 and 16 bits: the same array as Pillow's decode made RGB. Anything else (alpha, palette,
    a transparent colour, EXIF, a truncated stream) is left to Pillow's path, which handles it or names it."""
    from pipeline.ingest.containers import plain_png_pixels
    from pipeline.prepare.load import to_rgb

    settings = PrepareSettings()
    rgb = _noise_image()
    sixteen_bit = (np.asarray(rgb).astype(np.uint16) * 257 + 91)[:, :, ::-1]  # OpenCV writes BGR
    import cv2

    for data in (_png(rgb), _png(rgb.convert("L")), cv2.imencode(".png", sixteen_bit)[1].tobytes()):
        plain = plain_png_pixels(data, 0, settings)
        assert plain is not None and plain.flags.writeable
        assert np.array_equal(plain, np.asarray(to_rgb(open_page(data, 0, settings))))
    exif = Image.Exif()
    exif[0x0112] = 6
    for data in (_png(rgb.convert("RGBA")), _png(rgb.convert("P")), _png(rgb.convert("LA")),
                 _png(rgb, transparency=(0, 0, 0)), _png(rgb, exif=exif), _png(rgb)[:5000]):
        assert plain_png_pixels(data, 0, settings) is None
    with pytest.raises(ContainerError):
        open_page(_png(rgb)[:5000], 0, settings)
    with pytest.raises(ContainerError) as too_big:
        plain_png_pixels(_png(rgb), 0, PrepareSettings(max_input_pixels=100_000))
    assert too_big.value.reason is Reason.TOO_MANY_PIXELS
