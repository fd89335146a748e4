#!/usr/bin/env python3
"""Build SGLang, sgl-kernel, FlashInfer and torch into versioned releases (role sglang_build): the command line.

The tool is the package sglang_build_tool beside this file (its docstring: the rules a build
keeps, the phases, the modules); sglang_release.py and flashinfer_aot.py are beside it too.
"""

import sys

if __name__ == "__main__":
    from sglang_build_tool.cli import main

    sys.exit(main())
