"""Passwords out of URLs (registry/masking.py), the rule the registry settings and the router share."""
from __future__ import annotations

import pytest

from registry.config import MASK, RegistryConfig
from registry.exceptions import RegistryConfigError
from registry.masking import mask_url
from router.masking import MASK as ROUTER_MASK
from router.masking import mask_url as router_mask_url


@pytest.mark.parametrize("url, masked", [
    ("http://svc:pw@host:8081", "http://svc:#@host:8081"),
    ("https://svc:p@ss@host/apis/ccompat/v7", "https://svc:#@host/apis/ccompat/v7"),  # '@' in the password
    ("https://host/api?token=abc&x=1", "https://host/api?token=#&x=1"),
    ("http://svc@host:8081", "http://svc@host:8081"),  # no password, nothing to hide
    ("sqlite:////tmp/catalog.db", "sqlite:////tmp/catalog.db"),
])
def test_each_caller_gets_its_own_mask(url, masked):
    assert mask_url(url, "#") == masked
    assert router_mask_url(url) == masked.replace("#", ROUTER_MASK)


def test_every_url_of_a_registry_list_is_masked():
    cfg = RegistryConfig(url="http://a:first-secret@r1:8081, http://b:second-secret@r2:8081")
    assert cfg.masked_url == f"http://a:{MASK}@r1:8081,http://b:{MASK}@r2:8081"
    assert "secret" not in repr(cfg) and cfg.masked_url in repr(cfg)
    with pytest.raises(RegistryConfigError) as err:
        RegistryConfig(url="http://a:s3cret@r1:8081,ftp://b:s3cret@r2")
    assert "s3cret" not in str(err.value) and f"ftp://b:{MASK}@r2" in str(err.value)
