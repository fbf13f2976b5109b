"""Result files (`files`), the data the repository ships (`shipped`) and its precomputed results (`precomputed`)."""

from attnlib.results.files import (
    ResultFile,
    ResultFileError,
    json_ready,
    make_result_file,
    read_result_file,
    write_result_file,
)

__all__ = ["ResultFile", "ResultFileError", "json_ready", "make_result_file", "read_result_file", "write_result_file"]
