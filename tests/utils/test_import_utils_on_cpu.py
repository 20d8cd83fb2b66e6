"""load_extern_type accepts what verl 0.5's does: a file path, a file:// URI, pkg://module; None gives None."""

from __future__ import annotations

import textwrap

import pytest

from hybridrl.utils.import_utils import import_external_libs, load_extern_type

MODULE_TEXT = textwrap.dedent(
    """
    GREETING = "hello"

    class Thing:
        def __init__(self, value="default"):
            self.value = value

    def double(x):
        return 2 * x
    """
)


@pytest.fixture()
def module_file(tmp_path):
    path = tmp_path / "user_code.py"
    path.write_text(MODULE_TEXT)
    return str(path)


def test_loads_classes_functions_and_constants_from_a_file(module_file):
    thing = load_extern_type(module_file, "Thing")
    assert thing().value == "default" and thing("x").value == "x"
    assert load_extern_type(module_file, "double")(4) == 8
    assert load_extern_type(module_file, "GREETING") == "hello"
    assert load_extern_type(f"file://{module_file}", "GREETING") == "hello"


def test_pkg_uri_in_dotted_and_slashed_forms():
    from hybridrl.utils.dataset.rl_dataset import RLHFDataset

    assert load_extern_type("pkg://hybridrl.utils.dataset.rl_dataset", "RLHFDataset") is RLHFDataset
    assert load_extern_type("pkg://hybridrl/utils/dataset/rl_dataset", "RLHFDataset") is RLHFDataset


def test_empty_path_gives_none():
    assert load_extern_type(None, "Anything") is None
    assert load_extern_type("", "Anything") is None


def test_errors_name_the_file_and_the_key(module_file, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"/nonexistent/path\.py.*data\.custom_cls\.path"):
        load_extern_type("/nonexistent/path.py", "X", key="data.custom_cls.path")
    with pytest.raises(AttributeError, match=r"Custom type 'Missing' not found in .*user_code\.py.*Thing"):
        load_extern_type(module_file, "Missing")
    broken = tmp_path / "broken.py"
    broken.write_text("This is not valid Python syntax :")
    with pytest.raises(RuntimeError, match=r"broken\.py"):
        load_extern_type(str(broken), "X")
    with pytest.raises(ModuleNotFoundError):
        load_extern_type("pkg://no_such_package.mod", "X")


def test_import_external_libs_accepts_one_name_a_list_or_none():
    import_external_libs(None)
    import_external_libs("json")
    import_external_libs(["json", "csv"])
    with pytest.raises(ModuleNotFoundError):
        import_external_libs("no_such_module_here")
