"""A full disk (ENOSPC) while the kernel cache writes an entry: the compile works, nothing is
cached, one warning. The real conditions (a file size limit, SIGKILL, read-only and unreadable
roots) are in ``tests/ops_base/test_cache_crash.py``; ENOSPC cannot be had for real without a
small file system, so here the write fails as it would."""

import errno
import os


def test_no_space_left_is_handled_like_the_file_size_limit(plugin_env, tmp_path, monkeypatch):
    import warnings

    import torch
    from fixture_packs import arithmetic_rules, pack

    from nkipy_core import CacheWarning, cache_stats
    from nkipy_core.cache import kernel_cache

    plugin_env.add(pack(arithmetic_rules()), "arith", "arith-pack", "1.0")
    real_write = kernel_cache._write_private

    def full_disk(path, data):
        if path.is_relative_to(tmp_path / "tmp"):  # staging an entry
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_write(path, data)

    monkeypatch.setattr(kernel_cache, "_write_private", full_disk)
    cache_stats.clear()
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(
            lambda a: torch.exp(a) * a, backend="nkipy", options={"nkipy_cache": str(tmp_path)}
        )(x)
    torch.testing.assert_close(out, torch.exp(x) * x)
    (warning,) = [w for w in caught if w.category is CacheWarning]
    assert "ENOSPC: No space left on device" in str(warning.message)
    assert cache_stats["store_failed"] == 1 and cache_stats["compiled_kernels"] == 1
    assert not list((tmp_path / "kernels").iterdir()) and not list((tmp_path / "tmp").iterdir())
