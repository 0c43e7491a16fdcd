"""Image folders and lists: JPEG and PNG decoded, cropped and resized in C++ worker threads."""

import os

from gpufeed import _gpufeed


def images(path, *, size=224, crop="random", resize=None, scale=(0.08, 1.0),
           ratio=(3.0 / 4.0, 4.0 / 3.0), flip=True, dtype="uint8", normalize=None,
           dct_scaling=True, exif_orientation=True, max_pixels=178956970, on_error="raise",
           strict=False, path_column="path", label_column="label", classes=None, cache="none",
           cache_size=256, shm_dir="/dev/shm", verbose=True):
    """Opens an image data set for gpufeed.Loader; fields `image` (uint8 [3, size, size], RGB,
    channels first; float32 or float16 with `dtype`) and `label` (int64).

    path:       a folder in torchvision's ImageFolder layout (one sub-folder per class,
                classes sorted by name: the same class_to_idx and sample order), or a CSV
                list file with a header (`path_column`, relative to the list's folder, and
                `label_column`, an int or a class name; `classes` fixes the names' order).
    crop:       "random": RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip
                (`flip`), drawn from (loader seed, epoch, sample index): the same on any
                machine. "center": Resize(resize) + CenterCrop(size) for evaluation
                (`resize` defaults to size * 256 / 224).
    dtype:      "uint8" (default: 0..255), "float32" or "float16": x / 255 as torchvision's
                ToTensor, computed in the worker threads.
    normalize:  (mean, std), three values each (RGB, on the 0..1 scale), e.g.
                ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)): the image becomes
                (x / 255 - mean) / std as torchvision's ToTensor + Normalize give it (equal in
                float32; float16 rounds that). Needs a float dtype.
    dct_scaling: decode JPEGs at 1/2, 1/4 or 1/8 scale in the DCT where the crop stays at
                least the output size there (less decoding work, the resize still reduces).
    exif_orientation: apply a JPEG's EXIF orientation (PIL and torchvision do not).
    max_pixels: refuse images whose header claims more pixels (decompression bombs).
    on_error:   "raise": a file that cannot be decoded raises from the loader, naming it,
                and a folder holding BMP, TIFF, WebP, PPM or PGM files (which torchvision
                lists and gpufeed does not decode) is refused when opened, naming them;
                "skip": the next good sample (image and label) takes its place, while
                batch.indices keeps the index asked for; Loader.stats()["skipped"] counts
                them (each failed read of a sample once) and stats()["skipped_files"] lists
                the first few.
    strict:     False: a JPEG libjpeg decodes with a warning ("Corrupt JPEG data: 3
                extraneous bytes before marker 0xd9", common in camera files) is decoded as
                PIL decodes it, and counted in stats()["decode_warnings"]; True: an error.
    cache:      "none", "ram", "shm" or "auto": decode each image once to `cache_size` on
                its shorter side (longer side at most 4/3 of it) and cut later epochs'
                crops from there.

    PNG pixels are the stored values, as PIL and torchvision give them (no gamma
    conversion); 16-bit PNGs keep their high byte as PIL does, except 16-bit grey, which
    gpufeed scales to 8 bits (v * 255 / 65535) where PIL clips it at 255. The EXIF
    orientation of a PNG (eXIf chunk) is applied like a JPEG's.

    Resampling is PIL's bilinear with antialiasing; with dct_scaling=False and
    exif_orientation=False the pixels equal torchvision's on the same crop. The source's
    paths(batch.indices) and labels(...) take a list, numpy array or tensor of indices;
    source.stats() gives the skip and warning counts.
    """
    if normalize is not None:
        mean, std = normalize
        normalize = ([float(m) for m in mean], [float(s) for s in std])
    options = {
        "size": int(size), "crop": str(crop), "resize": int(resize or 0),
        "scale": (float(scale[0]), float(scale[1])), "ratio": (float(ratio[0]), float(ratio[1])),
        "flip": bool(flip), "dct_scaling": bool(dct_scaling),
        "dtype": str(dtype).replace("torch.", ""),  # "float32" or torch.float32
        "normalize_mean": normalize[0] if normalize else [],
        "normalize_std": normalize[1] if normalize else [],
        "exif_orientation": bool(exif_orientation), "max_pixels": int(max_pixels),
        "on_error": str(on_error), "strict": bool(strict), "path_column": str(path_column),
        "label_column": str(label_column), "classes": [str(c) for c in (classes or [])],
        "cache": str(cache), "cache_size": int(cache_size), "shm_dir": os.fspath(shm_dir),
        "verbose": bool(verbose),
    }
    return _gpufeed.open_images(os.fspath(path), options)


def class_to_idx(source):
    """{class name: label} as torchvision's ImageFolder.class_to_idx."""
    return {name: i for i, name in enumerate(source.classes)}
