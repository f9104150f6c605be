"""Settings from ``--config`` files take their fields' types once, where they are read: a
string boolean is never silently true, a number written as YAML text is a number, and a value
that cannot mean its type is one error naming the setting and the file."""

from __future__ import annotations

import json

import pytest

from isotropy.training.config import describe
from isotropy.training.settings import args_from_dict


def _args(tmp_path, text: str, suffix: str, **given):
    path = tmp_path / f"settings{suffix}"
    path.write_text(text)
    return args_from_dict({"config": str(path), "output_dir": str(tmp_path / "run"), **given})


@pytest.mark.parametrize("spelling,expected", [
    ('"false"', False), ('"no"', False), ('"No"', False), ("'0'", False), ("0", False),
    ("false", False), ('"true"', True), ('"yes"', True), ("1", True), ("true", True)])
def test_yaml_flags_mean_what_they_say(tmp_path, spelling, expected):
    iso, _ = _args(tmp_path, f"task: sst2\nselect_features: {spelling}\n"
                             f"include_padding: {spelling}\n", ".yaml")
    assert iso.select_features is expected and iso.include_padding is expected
    recorded = describe(iso, _)["isotropy"]
    assert recorded["select_features"] is expected  # the record holds the real boolean


def test_json_flags_and_numbers(tmp_path):
    iso, train = _args(tmp_path, json.dumps({"include_padding": "no", "learning_rate": "2e-5",
                                             "seed": "3", "tuning": "-0.5"}), ".json")
    assert iso.include_padding is False
    assert train.learning_rate == 2e-5 and train.seed == 3 and iso.tuning == -0.5


def test_a_yaml_number_that_pyyaml_reads_as_text(tmp_path):
    """PyYAML reads ``1e-4`` (no dot) as a string; here it is the number."""
    _, train = _args(tmp_path, "learning_rate: 1e-4\nweight_decay: 1e-2\n", ".yaml")
    assert train.learning_rate == 1e-4 and isinstance(train.learning_rate, float)
    assert train.weight_decay == 0.01


def test_a_trainingarguments_flag_from_a_file(tmp_path):
    _, train = _args(tmp_path, "disable_tqdm: 'yes'\nfp16: 'false'\n", ".yml")
    assert train.disable_tqdm is True and train.fp16 is False


@pytest.mark.parametrize("line,message", [
    ("select_features: maybe", "select_features must be true or false, got 'maybe'"),
    ("include_padding: 2", "include_padding must be true or false, got 2"),
    ("learning_rate: fast", "learning_rate must be a number, got 'fast'"),
    ("seed: 1.5", "seed must be an integer, got 1.5"),
    ("num_train_epochs: .inf", "num_train_epochs must be finite"),
])
def test_a_wrong_type_names_the_setting_and_the_file(tmp_path, line, message):
    with pytest.raises(ValueError) as err:
        _args(tmp_path, f"{line}\n", ".yaml")
    assert message in str(err.value)
    assert f"config file {tmp_path / 'settings.yaml'}" in str(err.value)


def test_an_unknown_setting_names_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"unknown setting\(s\) in the config file .*"
                                         r"settings.yaml: selct_features"):
        _args(tmp_path, "selct_features: false\n", ".yaml")


def test_settings_given_as_a_dict_are_converted_too(tmp_path):
    iso, _ = args_from_dict({"include_padding": "false", "output_dir": str(tmp_path / "r")})
    assert iso.include_padding is False
    with pytest.raises(ValueError, match="settings: include_padding must be true or false"):
        args_from_dict({"include_padding": "off", "output_dir": str(tmp_path / "r")})


def test_a_value_out_of_range_in_a_file_names_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"--zeta must be in \[0, 1\].* \(from config file "
                                         r".*settings.yaml\)"):
        _args(tmp_path, "zeta: 2\n", ".yaml")
    with pytest.raises(ValueError) as err:  # given on the command line: no file named
        _args(tmp_path, "seed: 1\n", ".yaml", zeta=2.0)
    assert "config file" not in str(err.value)


@pytest.mark.parametrize("typed, recorded", [("MiniLM", "minilm"), ("MPNET", "mpnet"),
                                             ("bert-base-uncased", "bert-base-uncased")])
def test_an_offline_alias_is_recorded_in_one_spelling(tmp_path, typed, recorded):
    iso, _ = args_from_dict({"model": typed, "output_dir": str(tmp_path / "r")})
    assert iso.model == recorded


def test_a_config_file_naming_another_is_refused(tmp_path):
    """``config:`` inside a config file would be ignored (its settings never read): refused."""
    inner = tmp_path / "inner.yaml"
    inner.write_text("max_steps: 2\n")
    with pytest.raises(ValueError, match=r"config file .*settings.yaml sets config "
                                         r"\('.*inner.yaml'\): a config file cannot name "
                                         r"another"):
        _args(tmp_path, f"config: {inner}\ntask: sst2\n", ".yaml")
    with pytest.raises(ValueError, match="cannot name another"):
        _args(tmp_path, json.dumps({"config": str(inner)}), ".json")


@pytest.mark.parametrize("encoding,name", [("utf-16", "UTF-16"), ("utf-32", "UTF-32")])
def test_a_config_file_not_in_utf8_names_the_file(tmp_path, encoding, name):
    path = tmp_path / "settings.yaml"
    path.write_bytes("task: sst2\n".encode(encoding))  # with its byte-order mark
    with pytest.raises(ValueError) as err:
        args_from_dict({"config": str(path), "output_dir": str(tmp_path / "run")})
    assert str(err.value) == (f"config file {path}: the file is {name} (its byte-order mark), "
                              "not UTF-8; save it as UTF-8")


def test_a_config_file_with_a_byte_that_is_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "settings.yaml"
    path.write_bytes(b"task: sst2\nmodel: caf\xe9\n")
    with pytest.raises(ValueError, match=rf"config file {path}:2: not valid UTF-8 \(byte 0xe9"):
        args_from_dict({"config": str(path), "output_dir": str(tmp_path / "run")})


def test_a_config_directory_is_not_said_to_be_missing(tmp_path):
    with pytest.raises(ValueError) as err:
        args_from_dict({"config": str(tmp_path), "output_dir": str(tmp_path / "run")})
    assert str(err.value) == f"config file {tmp_path} is a directory, not a file of settings"


def test_a_setting_given_twice_in_a_config_file_is_refused(tmp_path):
    """YAML and JSON keep the last of two equal keys without a word: which was meant?"""
    with pytest.raises(ValueError, match=r"config file .*settings.yaml is not valid YAML: "
                                         r"line 3, column 1: the key 'learning_rate' is given "
                                         "twice"):
        _args(tmp_path, "learning_rate: 1e-3\ntask: sst2\nlearning_rate: 1e-5\n", ".yaml")
    with pytest.raises(ValueError, match=r"config file .*settings.json is not valid JSON: the "
                                         "key 'seed' is given twice"):
        _args(tmp_path, '{"seed": 1, "seed": 2}', ".json")


@pytest.mark.parametrize("line,message", [
    ("zeta: null", "zeta has no value (null)"),
    ("learning_rate: null", "learning_rate has no value (null)"),
    ("regularizer: 5", "regularizer must be a name or a list of names, got 5"),
    ("output_dir: 5", "output_dir must be text, got 5"),
    ("1: 2", "setting names must be text, got 1"),
])
def test_a_value_of_no_use_in_a_file_is_named_before_any_work(tmp_path, line, message):
    # each was a bare TypeError (a comparison with None, iterating an int, a path of an int)
    path = tmp_path / "c.yaml"
    path.write_text(f"task: sst2\n{line}\n")
    with pytest.raises(ValueError) as err:
        args_from_dict({"config": str(path), "report_to": "none"})
    assert message in str(err.value) and str(path) in str(err.value)


@pytest.mark.parametrize("text,setting", [
    ("tuning: -5\n", "tuning"),                         # I-STAR's weight, no regularizer on
    ("regularizer: entropy\nzeta: 0.9\n", "zeta"),      # I-STAR's zeta, entropy on
    ("istar_lambda: -5\n", "tuning"),                   # the paper's alias
])
def test_a_regularizers_setting_in_a_config_file_is_refused_while_it_is_off(tmp_path, text,
                                                                               setting):
    # the same setting given as a flag was refused; from a file it trained without it
    from isotropy.training.settings import parse_train_args

    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"^{setting} \(set in config file .*c\.yaml\) is a "
                                         "setting of the istar regularizer, which is not on"):
        parse_train_args(["--config", str(path), "--output_dir", str(tmp_path / "o"),
                          "--report_to", "none"])
    # with its regularizer on, the same file is taken
    path.write_text("regularizer: istar\n" + text.replace("regularizer: entropy\n", ""))
    iso, _ = parse_train_args(["--config", str(path), "--output_dir", str(tmp_path / "o"),
                               "--report_to", "none"])
    assert iso.regularizer == ["istar"]


def test_a_path_object_for_a_text_setting_is_its_text(tmp_path):
    # from Python, paths come as pathlib objects: taken as their text, never refused
    iso, train = args_from_dict({"output_dir": tmp_path / "run", "task": "sst2",
                                 "report_to": "none"})
    assert train.output_dir == str(tmp_path / "run")
