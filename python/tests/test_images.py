"""gpufeed.images against torchvision and PIL: same classes and sample order as ImageFolder,
the same pixels on the same crop, every colour mode as PIL's convert("RGB"), bad files named
or skipped."""

import os

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import datasets
from torchvision.transforms import functional as F

import gpufeed
from gpufeed import _gpufeed


def _pattern(w, h, seed):
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([(x * 3 + y * 5 + seed * 37) % 256, (x * 7 - y * 2 + seed * 11) % 256,
                    ((x // 6 + y // 4) % 3) * 80 + seed], axis=-1)
    rng = np.random.default_rng(seed)
    return np.clip(rgb + rng.integers(-20, 20, rgb.shape), 0, 255).astype(np.uint8)


@pytest.fixture
def folder(tmp_path):
    """Three classes, JPEG and PNG, nested folders, a non-image file torchvision skips."""
    root = tmp_path / "imgs"
    seed = 0
    for cls in ["zebra", "Ant", "bee"]:
        for i in range(3):
            seed += 1
            w, h = 60 + 13 * seed % 70, 50 + 11 * seed % 60
            sub = root / cls / ("deep" if i == 2 else "")
            sub.mkdir(parents=True, exist_ok=True)
            ext = ".png" if i == 1 else ".JPG" if seed % 4 == 0 else ".jpg"
            image = Image.fromarray(_pattern(w, h, seed))
            image.save(sub / f"{i}{ext}", quality=90)
        (root / cls / "notes.txt").write_text("not an image")
    return root


def _loader_images(source, seed=0, epoch=0):
    loader = gpufeed.Loader(source, batch_size=4, shuffle=False, seed=seed, workers=2,
                            device="cpu")
    loader.set_epoch(epoch)
    images, labels = [], []
    for batch in loader:
        images.append(batch["image"].clone())
        labels.append(batch["label"].clone())
    loader.close()
    return torch.cat(images), torch.cat(labels)


def test_classes_and_order_are_imagefolders(folder):
    source = gpufeed.images(folder)
    reference = datasets.ImageFolder(str(folder))
    assert gpufeed._images.class_to_idx(source) == reference.class_to_idx
    assert source.paths(list(range(len(source)))) == [p for p, _ in reference.samples]
    assert [source.label(i) for i in range(len(source))] == reference.targets


def test_center_crop_equals_torchvision(folder):
    """Same decode (libjpeg-turbo's IDCT in both), same resampling: equal within +-1."""
    source = gpufeed.images(folder, crop="center", size=32, resize=40, dct_scaling=False)
    images, labels = _loader_images(source)
    reference = datasets.ImageFolder(str(folder))
    errors = []
    for i, (path, target) in enumerate(reference.samples):
        with Image.open(path) as im:
            expected = F.pil_to_tensor(F.center_crop(F.resize(im.convert("RGB"), 40), 32))
        errors.append((images[i].int() - expected.int()).abs())
        assert labels[i] == target
    errors = torch.stack(errors)
    # Measured: max 0, mean 0.0 (PIL's ImagingResample reproduced in 22-bit fixed point).
    assert errors.max() <= 1, errors.max()
    assert errors.float().mean() < 0.01


def test_center_crop_of_images_stored_at_the_resize_size_equals_torchvision(tmp_path):
    """Images whose shorter side is already the resize size (data sets pre-resized to 256):
    PIL's resize is then a copy, and so is gpufeed's, pixel for pixel."""
    root = tmp_path / "sized"
    for i, (w, h) in enumerate([(40, 40), (40, 57), (63, 40)]):
        (root / "c").mkdir(parents=True, exist_ok=True)
        image = Image.fromarray(_pattern(w, h, i + 1))
        image.save(root / "c" / (f"{i}.png" if i == 1 else f"{i}.jpg"), quality=90)
    images, _ = _loader_images(gpufeed.images(root, crop="center", size=32, resize=40))
    for i, (path, _) in enumerate(datasets.ImageFolder(str(root)).samples):
        with Image.open(path) as im:
            expected = F.pil_to_tensor(F.center_crop(F.resize(im.convert("RGB"), 40), 32))
        assert torch.equal(images[i], expected), path


def test_random_crop_equals_torchvision_on_the_same_crop(folder):
    seed, epoch = 5, 3
    source = gpufeed.images(folder, size=24, dct_scaling=False)
    images, _ = _loader_images(source, seed, epoch)
    again, _ = _loader_images(source, seed, epoch)
    assert torch.equal(images, again)
    other, _ = _loader_images(source, seed, epoch + 1)
    assert not torch.equal(images, other)
    flips = 0
    for i in range(len(source)):
        with Image.open(source.path(i)) as im:
            im = im.convert("RGB")
            x, y, w, h, flip = _gpufeed.image_random_crop(im.width, im.height, seed, epoch, i)
            expected = F.pil_to_tensor(F.resized_crop(im, y, x, h, w, [24, 24]))
        if flip:
            expected = expected.flip(-1)
            flips += 1
        assert (images[i].int() - expected.int()).abs().max() <= 1
    assert 0 < flips < len(source)


def test_dct_scaled_decode_stays_close(tmp_path):
    """A crop 4x the output decodes at 1/4 scale: close to the full-size decode."""
    (tmp_path / "c").mkdir()
    Image.fromarray(_pattern(1200, 1000, 3)).save(tmp_path / "c" / "big.jpg", quality=95)
    fast = _loader_images(gpufeed.images(tmp_path, crop="center", size=64, resize=64))[0]
    slow = _loader_images(gpufeed.images(tmp_path, crop="center", size=64, resize=64,
                                         dct_scaling=False))[0]
    diff = (fast.int() - slow.int()).abs().float()
    assert diff.mean() < 6, diff.mean()


@pytest.mark.parametrize("mode", ["L", "CMYK", "P", "RGBA", "LA", "I;16"])
def test_colour_modes_match_pil_convert_rgb(tmp_path, mode):
    (tmp_path / "c").mkdir()
    base = Image.fromarray(_pattern(40, 30, 7))
    path = tmp_path / "c" / ("x.jpg" if mode in ("L", "CMYK") else "x.png")
    if mode == "I;16":  # 16-bit grey: 8-bit values * 257, read back as the 8-bit values
        image = Image.fromarray(np.asarray(base.convert("L")).astype(np.uint16) * 257)
        expected_image = base.convert("L").convert("RGB")
    else:
        image = base.convert(mode)
        if mode in ("RGBA", "LA"):  # alpha that varies: dropped, never composited
            image.putalpha(Image.linear_gradient("L").resize(image.size))
        expected_image = None
    image.save(path, **({"quality": 90} if path.suffix == ".jpg" else {}))
    got = _loader_images(gpufeed.images(tmp_path, crop="center", size=30, resize=30,
                                        dct_scaling=False))[0][0]
    if expected_image is None:
        with Image.open(path) as im:
            expected_image = im.convert("RGB")
    expected = F.pil_to_tensor(F.center_crop(expected_image, 30))
    assert (got.int() - expected.int()).abs().max() <= 1


def test_exif_orientation_is_applied(tmp_path):
    (tmp_path / "c").mkdir()
    image = Image.fromarray(_pattern(40, 20, 1))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 clockwise to display
    image.save(tmp_path / "c" / "r.jpg", quality=95, exif=exif)
    got = _loader_images(gpufeed.images(tmp_path, crop="center", size=20, resize=20,
                                        dct_scaling=False))[0][0]
    with Image.open(tmp_path / "c" / "r.jpg") as im:
        from PIL import ImageOps
        upright = ImageOps.exif_transpose(im).convert("RGB")
    assert upright.size == (20, 40)
    expected = F.pil_to_tensor(F.center_crop(upright, 20))
    assert (got.int() - expected.int()).abs().max() <= 1


def test_bad_files_raise_naming_the_file_or_are_skipped(folder):
    bad = folder / "bee" / "0.jpg"
    bad.write_bytes(b"")
    with pytest.raises(gpufeed.CorruptData, match=r"bee/0.jpg: empty file \(0 bytes\)"):
        _loader_images(gpufeed.images(folder))
    source = gpufeed.images(folder, on_error="skip")
    loader = gpufeed.Loader(source, batch_size=4, shuffle=False, workers=2, device="cpu")
    seen = sum(len(batch["label"]) for batch in loader)
    assert seen == len(source)
    stats = loader.stats()
    # Counted each time it is replaced: the loader may have read ahead into the next epoch.
    assert stats["skipped"] >= 1
    assert len(stats["skipped_files"]) == 1
    assert "bee/0.jpg: empty file" in stats["skipped_files"][0]
    loader.close()


def test_decompression_bomb_is_refused_with_a_raisable_limit(tmp_path):
    (tmp_path / "c").mkdir()
    Image.fromarray(_pattern(64, 48, 2)).save(tmp_path / "c" / "a.jpg")
    with pytest.raises(gpufeed.InvalidArgument, match="over max_pixels = 1000.*raise max_pixels"):
        _loader_images(gpufeed.images(tmp_path, size=16, max_pixels=1000))
    assert _loader_images(gpufeed.images(tmp_path, size=16, max_pixels=64 * 48))[0].shape == (
        1, 3, 16, 16)


def test_csv_list_with_class_names(tmp_path):
    (tmp_path / "img").mkdir()
    for name in ["a", "b", "c"]:
        Image.fromarray(_pattern(30, 30, ord(name))).save(tmp_path / "img" / f"{name}.png")
    (tmp_path / "list.csv").write_text("path,label\nimg/a.png,dog\nimg/b.png,cat\nimg/c.png,dog\n")
    source = gpufeed.images(tmp_path / "list.csv", size=16)
    assert source.classes == ["cat", "dog"]
    _, labels = _loader_images(source)
    assert labels.tolist() == [1, 0, 1]
    (tmp_path / "bad.csv").write_text("path,label\nimg/a.png,dog\nimg/gone.png,cat\n")
    with pytest.raises(gpufeed.NotFound, match="img/gone.png"):
        _loader_images(gpufeed.images(tmp_path / "bad.csv", size=16))
    with pytest.raises(gpufeed.InvalidArgument, match=r"list.csv:3: unknown class 'cat'"):
        gpufeed.images(tmp_path / "list.csv", classes=["dog"])


def test_cached_epochs_repeat_crops_from_the_stored_images(folder):
    source = gpufeed.images(folder, size=24, cache="ram", cache_size=32, verbose=False)
    assert source.cache_tier == "none"  # asked for: the loader's assembly makes the copy
    first, labels = _loader_images(source, 1, 0)
    assert source.cache_tier == "ram"
    second, labels2 = _loader_images(source, 1, 0)  # the same copy
    assert torch.equal(first, second) and torch.equal(labels, labels2)
    assert first.dtype == torch.uint8 and first.shape == (len(source), 3, 24, 24)


def test_options_left_out_take_the_cpp_defaults(folder):
    """images() passes only what the caller gave: the rest is ImageOptions' default, and
    spelling those defaults out gives the same source and the same pixels."""
    defaults = _gpufeed.image_defaults()
    assert defaults["size"] == 224 and defaults["crop"] == "random"
    assert defaults["on_error"] == "raise" and defaults["dtype"] == "uint8"
    assert "Defaults: size=224" in gpufeed.images.__doc__
    implicit = gpufeed.images(folder, size=16)
    explicit = gpufeed.images(folder, **{**defaults, "size": 16})
    assert implicit.describe() == explicit.describe()
    assert implicit.identity() == explicit.identity()
    assert torch.equal(_loader_images(implicit, seed=3)[0], _loader_images(explicit, seed=3)[0])
    with pytest.raises(gpufeed.InvalidArgument, match='crop must be "random" or "center"'):
        gpufeed.images(folder, crop="middle")
    with pytest.raises(gpufeed.InvalidArgument, match='on_error must be "raise" or "skip"'):
        gpufeed.images(folder, on_error="ignore")
