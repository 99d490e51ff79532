"""Build the compiled decoders (Cython -> C extension modules); everything else is in pyproject.toml.

The sFlow decoder and the batch codec's column walk are compiled when the wheel (or image, or editable
install) is built, never at run time: building needs a C compiler and the Python headers
(docs/architecture.md, "Compiled decoders").
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

EXTENSIONS = [
    # the sampled-header parser, which the sFlow walk cimports (its .pxd declares what they share)
    Extension("ingest.decode._sflow_packet", ["ingest/decode/_sflow_packet.pyx"]),
    Extension("ingest.decode._sflow_compiled", ["ingest/decode/_sflow_compiled.pyx"]),
    Extension("schemas._batch_compiled", ["schemas/_batch_compiled.pyx"]),
]

setup(ext_modules=cythonize(EXTENSIONS, compiler_directives={"language_level": 3}))
