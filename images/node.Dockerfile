# testbed's node image. Built by testbed/network/images.py (`testbed images build`), which fills the
# context: wheels/ (torch, Horovod, every dependency, and requirements.txt pinning them all)
# and testbed/ (the testbed wheel). The build needs no network: nothing is fetched here.
#
# BASE must provide python3 with the venv module, at the host's minor version (its wheels go
# in), and iproute2; testbed's default base is Debian bookworm made with debootstrap.
ARG BASE
FROM ${BASE}
ARG PYTHON_VERSION

# The heavy layers first: they are rebuilt only when a wheel changes. One stage, not two: a
# second stage would copy the 1 GB venv (70 s here) and keep both on disk to save the 240 MB
# wheels layer. torch's C++ headers and gtest binaries go (145 MB): they are for building
# extensions and testing torch, not for running it.
COPY wheels/ /tmp/wheels/
RUN set -e; \
    have=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
      || { echo "BASE has no python3" >&2; exit 1; }; \
    [ "$have" = "$PYTHON_VERSION" ] \
      || { echo "BASE has Python $have; the wheels are for $PYTHON_VERSION" >&2; exit 1; }; \
    command -v ip >/dev/null || { echo "BASE has no ip (iproute2)" >&2; exit 1; }; \
    python3 -m venv /opt/testbed/venv; \
    PIP_DISABLE_PIP_VERSION_CHECK=1 /opt/testbed/venv/bin/pip install -q --no-index \
      --no-cache-dir --find-links /tmp/wheels -r /tmp/wheels/requirements.txt; \
    rm -rf /opt/testbed/venv/lib/python3*/site-packages/torch/include \
      /opt/testbed/venv/lib/python3*/site-packages/torch/test

ENV VIRTUAL_ENV=/opt/testbed/venv \
    PATH=/opt/testbed/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    LANG=C.UTF-8

# testbed last: a change in its source rebuilds only these two small layers, in seconds.
COPY testbed/ /tmp/testbed-wheel/
RUN /opt/testbed/venv/bin/pip install -q --no-index --no-deps --no-cache-dir \
      /tmp/testbed-wheel/*.whl \
    && rm -rf /tmp/testbed-wheel \
    && /opt/testbed/venv/bin/pip check
LABEL testbed.image=node
CMD ["sleep", "infinity"]
