"""Image folders and lists: JPEG and PNG decoded, cropped and resized in C++ worker threads."""

import os
import textwrap

from gpufeed import _gpufeed


def _pair(values):
    return (float(values[0]), float(values[1]))


# How each option the user gave is passed to C++ (which holds the defaults).
_CONVERT = {
    "size": int, "crop": str, "resize": int, "scale": _pair, "ratio": _pair, "flip": bool,
    "dtype": lambda d: str(d).replace("torch.", ""),  # "float32" or torch.float32
    "dct_scaling": bool, "exif_orientation": bool, "max_pixels": int, "on_error": str,
    "strict": bool, "path_column": str, "label_column": str,
    "classes": lambda names: [str(c) for c in names], "cache": str, "cache_size": int,
    "shm_dir": os.fspath, "verbose": bool,
}


def images(path, *, size=None, crop=None, resize=None, scale=None, ratio=None, flip=None,
           dtype=None, normalize=None, dct_scaling=None, exif_orientation=None, max_pixels=None,
           on_error=None, strict=None, path_column=None, label_column=None, classes=None,
           cache=None, cache_size=None, shm_dir=None, verbose=None):
    """Opens an image data set for gpufeed.Loader; fields `image` (uint8 [3, size, size], RGB,
    channels first; float32 or float16 with `dtype`) and `label` (int64).

    An option left out (None) takes the C++ default (ImageOptions in gpufeed/images.h),
    listed at the end.

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
                crops from there. The first gpufeed.Loader over the source makes the copy,
                which later loaders over it share; source.cache_tier says the tier from then.

    PNG pixels are the stored values, as PIL and torchvision give them (no gamma
    conversion); 16-bit PNGs keep their high byte as PIL does, except 16-bit grey, which
    gpufeed scales to 8 bits (v * 255 / 65535) where PIL clips it at 255. The EXIF
    orientation of a PNG (eXIf chunk) is applied like a JPEG's.

    Resampling is PIL's bilinear with antialiasing; with dct_scaling=False and
    exif_orientation=False the pixels equal torchvision's on the same crop. The source's
    paths(batch.indices) and labels(...) take a list, numpy array or tensor of indices;
    source.stats() gives the skip and warning counts.
    """
    given = {
        "size": size, "crop": crop, "resize": resize, "scale": scale, "ratio": ratio,
        "flip": flip, "dtype": dtype, "dct_scaling": dct_scaling,
        "exif_orientation": exif_orientation, "max_pixels": max_pixels, "on_error": on_error,
        "strict": strict, "path_column": path_column, "label_column": label_column,
        "classes": classes, "cache": cache, "cache_size": cache_size, "shm_dir": shm_dir,
        "verbose": verbose,
    }
    options = {key: _CONVERT[key](value) for key, value in given.items() if value is not None}
    if normalize is not None:
        mean, std = normalize
        options["normalize_mean"] = [float(m) for m in mean]
        options["normalize_std"] = [float(s) for s in std]
    return _gpufeed.open_images(os.fspath(path), options)


images.__doc__ += "\n" + textwrap.fill(
    "Defaults: " + ", ".join(f"{key}={value!r}" for key, value in
                             _gpufeed.image_defaults().items()) + ".",
    width=92, initial_indent="    ", subsequent_indent="    ") + "\n"


def class_to_idx(source):
    """{class name: label} as torchvision's ImageFolder.class_to_idx."""
    return {name: i for i, name in enumerate(source.classes)}
