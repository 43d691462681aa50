"""The labelling page as a person uses it, in headless Chromium (Debian's chromium and
chromium-driver, installed by `make browser`): pairs from `tether pairs`, ten verdicts by keyboard
including a tie, a skip and an undo, a server restart, two more, then `tether rm` on the file.
A response holding a <script> is shown as text and never runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tether.cli import main

pytestmark = pytest.mark.slow

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SCRIPT_PAIR = {"pair_id": "xss", "prompt": "what is 1 + 1 ?",
               "response_a": "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\"> 2",
               "response_b": "3", "provenance": {"strategy": "hand-written"}}


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class LabelServer:
    """`tether label` in a child process on a free port."""

    def __init__(self, pairs: Path, out: Path, log: Path):
        self.args = [sys.executable, "-m", "tether.cli", "label", "--pairs", str(pairs), "--out", str(out),
                     "--port", "0", "--guidelines", str(log.parent / "guidelines.txt")]
        self.log = log

    def __enter__(self):
        self.fh = open(self.log, "w")
        self.proc = subprocess.Popen(self.args, stdout=self.fh, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", "TETHER_LABEL_TOKEN": ""})
        deadline = time.monotonic() + 60
        while not (m := re.search(r"open http://127\.0\.0\.1:(\d+)/", self.log.read_text())):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)
        self.url = f"http://127.0.0.1:{m.group(1)}/"
        while "Uvicorn running" not in self.log.read_text():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        self.fh.close()


@pytest.fixture(scope="module")
def browser():
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.fail("Chromium and ChromeDriver are missing: run `make browser` (Debian: apt-get install chromium "
                    "chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,800"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def wait_until(fn, seconds=20):
    deadline = time.monotonic() + seconds
    while True:
        value = fn()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out waiting for the page"
        time.sleep(0.05)


def press(driver, key: str) -> None:
    """One key as a person presses it; waits until the page has saved it and shown the next pair."""
    from selenium.webdriver.common.by import By

    driver.execute_script("document.getElementById('status').textContent = ''")
    driver.find_element(By.TAG_NAME, "body").send_keys(key)
    wait_until(lambda: driver.find_element(By.ID, "status").text)
    status = driver.find_element(By.ID, "status")
    assert "error" not in (status.get_attribute("class") or ""), status.text


def open_page(driver, url: str, name: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(url)
    field = wait_until(lambda: driver.find_element(By.ID, "name"))
    field.clear()
    field.send_keys(name, Keys.ENTER)
    wait_until(lambda: driver.find_element(By.ID, "prompt").text)


def test_label_by_keyboard_restart_and_train_a_reward_model(trained, tmp_path, browser):
    from selenium.webdriver.common.by import By

    pairs = tmp_path / "pairs.jsonl"
    assert main(["pairs", "--policy", str(trained["sft"]), "--prompts", str(trained["task"] / "ppo_prompts.jsonl"),
                 "--out", str(pairs), "--max-prompts", "20", "--max-new-tokens", "8", "--temperature", "1.5"]) == 0
    made = rows(pairs)
    assert len(made) >= 14 and all(r["provenance"]["strategy"] == "temperature" for r in made)
    pairs.write_text("\n".join(json.dumps(r) for r in [SCRIPT_PAIR, *made]) + "\n")  # the <script> pair first
    (tmp_path / "guidelines.txt").write_text("Prefer the correct answer. Ignore exclamation marks.")
    labels = tmp_path / "labels.jsonl"

    with LabelServer(pairs, labels, tmp_path / "label1.log") as server:
        open_page(browser, server.url, "ann")
        assert "Prefer the correct answer" in browser.find_element(By.ID, "guidelines").text
        # The <script> response is on screen as text and did not run.
        shown = browser.find_element(By.ID, "left").text + browser.find_element(By.ID, "right").text
        assert "<script>window.__pwned = 1</script>" in shown
        assert browser.execute_script("return window.__pwned === undefined")
        for key in ("1", "2", "1", "=", "s", "2", "1", "u", "1", "2", "1", "2", "1"):
            press(browser, key)
        browser.save_screenshot(str(tmp_path / "label_page.png"))
    # 13 keys: a skip, and an undo that takes back the verdict before it: 10 verdicts, 9 preferences and a tie.
    assert len(rows(labels)) == 9 and len(rows(labels.with_name("labels.jsonl.ties.jsonl"))) == 1
    assert len(rows(labels.with_name("labels.jsonl.skips.jsonl"))) == 1

    with LabelServer(pairs, labels, tmp_path / "label2.log") as server:  # restarted: resumes where ann stopped
        open_page(browser, server.url, "ann")
        assert browser.find_element(By.ID, "progress").text.startswith("10 labelled by ann")
        before = {r["pair_id"] for r in rows(labels)}
        press(browser, "1")
        press(browser, "2")
    after = rows(labels)
    assert len(after) == 11 and {r["pair_id"] for r in after} > before
    assert all(r["annotator"] == "ann" and r["chosen"] != r["rejected"] for r in after)
    assert next(r for r in after if r["pair_id"] == "xss")  # the first pair was labelled like any other

    rm_out = tmp_path / "rm"
    assert main(["rm", f"model.name_or_path={trained['sft']}", f"data.train={labels}", "data.eval_size=2",
                 "data.max_length=64", "optim.batch_size=4", "max_steps=2", f"run.out={rm_out}",
                 "run.progress=false"]) == 0
    assert (rm_out / "model.safetensors").exists()
    docs_copy = os.environ.get("TETHER_SCREENSHOT_TO")
    if docs_copy:  # how docs/images/label_page.png was made
        shutil.copy(tmp_path / "label_page.png", docs_copy)
