"""gpufeed.images on files PIL decodes in its own way: PNG gamma and 16-bit samples (stored
values, high byte), interlacing, JPEGs with extraneous bytes (decoded, counted, refused with
strict=True), unsupported JPEGs and formats (named, never poisoning later files), and sample
indices given as tensors, arrays or lists."""

import struct
import zlib

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import functional as F

import gpufeed


def _pattern(w, h, channels, seed, high=256):
    y, x = np.mgrid[0:h, 0:w]
    planes = [(x * (3 + 2 * c) + y * (5 + c) + seed * 37 + ((x // 5 + y // 3) % 3) * 40) % high
              for c in range(channels)]
    return np.stack(planes, axis=-1)


def _chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def _write_png(path, samples, depth, colour, interlaced=False, gamma=None):
    """A PNG of `samples` (h x w x channels, uint8 or uint16) written by hand: PIL cannot write
    16-bit colour or interlaced files."""
    h, w = samples.shape[:2]
    raw = samples.astype(">u2" if depth == 16 else "u1")
    passes = ([(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
               (1, 0, 2, 2), (0, 1, 1, 2)] if interlaced else [(0, 0, 1, 1)])
    data = b""
    for x0, y0, dx, dy in passes:
        sub = raw[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        data += b"".join(b"\0" + row.tobytes() for row in sub)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, 1 if interlaced else 0)
    body = _chunk(b"IHDR", ihdr)
    if gamma is not None:
        body += _chunk(b"gAMA", struct.pack(">I", round(gamma * 100000)))
    body += _chunk(b"IDAT", zlib.compress(data)) + _chunk(b"IEND", b"")
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + body)


def _decode_all(root, **options):
    """Every sample of `root`, whole (centre crop of a square image to its own size)."""
    source = gpufeed.images(root, crop="center", dct_scaling=False, **options)
    loader = gpufeed.Loader(source, batch_size=8, shuffle=False, workers=2, device="cpu")
    images = torch.cat([batch["image"].clone() for batch in loader])
    stats = loader.stats()
    loader.close()
    return source, images, stats


def _pil(path):
    with Image.open(path) as im:
        return F.pil_to_tensor(im.convert("RGB"))


@pytest.mark.parametrize("name,depth,colour,interlaced,gamma", [
    ("rgb8_gamma045", 8, 2, False, 0.45455),
    ("rgb8_gamma1", 8, 2, True, 1.0),
    ("grey8_gamma07", 8, 0, False, 0.7),
    ("rgb16", 16, 2, False, None),
    ("rgb16_interlaced", 16, 2, True, 0.45455),
    ("rgba16_interlaced", 16, 6, True, None),
    ("la16_interlaced", 16, 4, True, None),
])
def test_png_pixels_equal_pils(tmp_path, name, depth, colour, interlaced, gamma):
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    samples = _pattern(32, 32, channels, 5, 65536 if depth == 16 else 256)
    if depth == 16:
        samples = samples * 40503 % 65536  # high and low bytes both vary
    path = tmp_path / "c" / f"{name}.png"
    path.parent.mkdir()
    _write_png(path, samples, depth, colour, interlaced, gamma)
    _, got, _ = _decode_all(tmp_path, size=32, resize=32)
    assert torch.equal(got[0], _pil(path))


def _with_junk_before(jpeg, marker, junk=b"\x01\x02\x03"):
    at = jpeg.index(b"\xff" + bytes([marker]), 2)
    return jpeg[:at] + junk + jpeg[at:]


def test_jpeg_with_extraneous_bytes_decodes_as_pil_counted_or_refused_when_strict(tmp_path):
    (tmp_path / "c").mkdir()
    Image.fromarray(_pattern(32, 32, 3, 2).astype(np.uint8)).save(tmp_path / "a.jpg", quality=90)
    jpeg = (tmp_path / "a.jpg").read_bytes()
    (tmp_path / "a.jpg").unlink()
    (tmp_path / "c" / "header.jpg").write_bytes(_with_junk_before(jpeg, 0xDB))
    (tmp_path / "c" / "tail.jpg").write_bytes(_with_junk_before(jpeg, 0xD9))
    source, got, stats = _decode_all(tmp_path, size=32, resize=32)
    assert torch.equal(got[0], _pil(tmp_path / "c" / "header.jpg"))
    assert torch.equal(got[1], _pil(tmp_path / "c" / "tail.jpg"))
    assert stats["decode_warnings"] >= 2
    assert any("header.jpg: Corrupt JPEG data: 3 extraneous bytes before marker 0xdb" in f
               for f in stats["decode_warning_files"])
    # The source's own count, read later: the loader's workers may have decoded the next
    # epoch's first batches meanwhile, so it can only have grown.
    assert source.stats()["decode_warnings"] >= stats["decode_warnings"]
    with pytest.raises(gpufeed.CorruptData, match=r"header.jpg: libjpeg warned: Corrupt JPEG"):
        _decode_all(tmp_path, size=32, resize=32, strict=True)


def test_unsupported_jpeg_never_poisons_later_files_with_skip(tmp_path):
    """A 12-bit JPEG is refused naming it; with on_error="skip" every other sample keeps its
    own image and label, read by the same worker."""
    for i, cls in enumerate(["a", "b", "c", "d"]):
        (tmp_path / cls).mkdir()
        Image.fromarray(_pattern(16, 16, 3, i).astype(np.uint8)).save(
            tmp_path / cls / "0.jpg", quality=90)
    clean_source, clean, _ = _decode_all(tmp_path, size=16, resize=16)
    jpeg = bytearray((tmp_path / "a" / "0.jpg").read_bytes())
    jpeg[jpeg.index(b"\xff\xc0") + 4] = 12
    (tmp_path / "a" / "0.jpg").write_bytes(bytes(jpeg))
    with pytest.raises(gpufeed.Unsupported, match=r"a/0.jpg: 12-bit JPEG"):
        _decode_all(tmp_path, size=16, resize=16)
    source = gpufeed.images(tmp_path, crop="center", size=16, resize=16, on_error="skip")
    loader = gpufeed.Loader(source, batch_size=4, shuffle=False, workers=1, device="cpu")
    batch = next(iter(loader))
    assert batch["label"].tolist() == [1, 1, 2, 3]
    assert torch.equal(batch["image"][1:], clean[1:])
    assert torch.equal(batch["image"][0], clean[1])
    loader.close()
    stats = source.stats()  # the loader may have read ahead into later epochs
    assert stats["skipped"] >= 1 and len(stats["skipped_files"]) == 1


def test_formats_gpufeed_does_not_decode_are_named_at_open(tmp_path):
    (tmp_path / "c").mkdir()
    image = Image.fromarray(_pattern(16, 16, 3, 1).astype(np.uint8))
    image.save(tmp_path / "c" / "0.jpg")
    for ext in ["bmp", "tiff", "ppm"]:
        image.save(tmp_path / "c" / f"1.{ext}")
    with pytest.raises(gpufeed.Unsupported, match=r"3 of 4 files are in formats gpufeed does "
                                                  r"not decode.*c/1.bmp, .*c/1.ppm, .*c/1.tiff"):
        gpufeed.images(tmp_path)
    source = gpufeed.images(tmp_path, on_error="skip", size=8)
    assert len(source) == 4  # torchvision's listing, each unsupported file replaced when read


def test_paths_and_labels_take_tensors_arrays_and_lists(tmp_path):
    for cls in ["a", "b"]:
        (tmp_path / cls).mkdir()
        for i in range(3):
            Image.fromarray(_pattern(12, 12, 3, i).astype(np.uint8)).save(
                tmp_path / cls / f"{i}.png")
    source = gpufeed.images(tmp_path, size=8)
    loader = gpufeed.Loader(source, batch_size=4, shuffle=True, seed=3, workers=1, device="cpu")
    batch = next(iter(loader))
    indices = batch.indices
    assert isinstance(indices, torch.Tensor)
    expected = [source.path(int(i)) for i in indices]
    assert source.paths(indices) == expected
    assert source.paths(indices.numpy()) == expected
    assert source.paths(indices.tolist()) == expected
    assert source.paths(indices.to(torch.int32)) == expected
    assert source.paths([]) == []
    assert source.labels(indices) == batch["label"].tolist()
    assert source.path(indices[0]) == expected[0]
    assert source.path(np.int64(indices[0])) == expected[0]
    assert source.label(indices[1]) == batch["label"][1].item()
    crop = gpufeed._gpufeed.image_random_crop
    assert crop(100, 80, 3, 0, indices[0]) == crop(100, 80, 3, 0, int(indices[0]))
    loader.close()
    with pytest.raises(gpufeed.InvalidArgument, match="must be integers"):
        source.paths(torch.tensor([0.5, 1.0]))
    with pytest.raises(gpufeed.InvalidArgument, match="out of range"):
        source.paths(torch.tensor([0, 6]))
    with pytest.raises(gpufeed.InvalidArgument, match="one-dimensional"):
        source.paths(np.zeros((2, 2), dtype=np.int64))


@pytest.mark.parametrize("cache", ["none", "ram"])
def test_normalize_equals_torchvision_to_tensor_then_normalize(tmp_path, cache):
    from torchvision import transforms
    for cls in ["a", "b"]:
        (tmp_path / cls).mkdir()
        for i in range(3):
            Image.fromarray(_pattern(40, 30, 3, i + 3 * len(cls)).astype(np.uint8)).save(
                tmp_path / cls / f"{i}.jpg", quality=90)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    common = dict(size=16, cache=cache, cache_size=24, verbose=False)

    def epoch(**options):
        source = gpufeed.images(tmp_path, **common, **options)
        loader = gpufeed.Loader(source, batch_size=4, shuffle=True, seed=5, workers=2,
                                device="cpu")
        out = torch.cat([b["image"].clone() for b in loader])
        loader.close()
        return out

    plain = epoch()
    as_float = epoch(dtype="float32", normalize=(mean, std))
    assert as_float.dtype == torch.float32 and as_float.shape == plain.shape
    expected = transforms.Normalize(mean, std)(plain.float().div(255))
    assert torch.equal(as_float, expected)  # the same float32 operations, value for value
    assert torch.equal(epoch(dtype=torch.float32), plain.float().div(255))
    half = epoch(dtype="float16", normalize=(mean, std))
    assert half.dtype == torch.float16
    assert torch.equal(half, expected.half())
    with pytest.raises(gpufeed.InvalidArgument, match="normalize needs dtype float32"):
        gpufeed.images(tmp_path, normalize=(mean, std))
    with pytest.raises(gpufeed.InvalidArgument, match="standard deviations > 0"):
        gpufeed.images(tmp_path, dtype="float32", normalize=(mean, (0.2, 0.0, 0.2)))
    with pytest.raises(gpufeed.InvalidArgument, match="dtype must be uint8, float32 or float16"):
        gpufeed.images(tmp_path, dtype="int32")
