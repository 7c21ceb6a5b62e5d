/* The job page's output box: follow new output, load earlier output, jump to the end, find text. Ref: #18
 *
 * htmx appends new output to #log (the poller in _log_tail.html); this file only decides where the box is scrolled
 * and adds what htmx does not: the box follows the end while the reader is at the end, and stays put (with a
 * "Follow" button) once they scroll up. "Load earlier output" puts the piece before what is shown in front of it
 * (GET <log url>?before=N answers it as plain text and says where it starts in X-Log-Start) without moving what the
 * reader looks at. "Find" marks matches in the output loaded so far; Enter and Shift+Enter step through them.
 * No dependencies, no build step: clusters are often air-gapped. */
(function () {
  "use strict";

  var NEAR_END_PX = 24; // closer to the end than this counts as "at the end"
  var MAX_MARKS = 2000; // more matches are counted, not marked: a DOM node each would slow the page

  function size(chars) {
    if (chars >= 1048576) return (chars / 1048576).toFixed(1) + " MB";
    if (chars >= 1024) return (chars / 1024).toFixed(1) + " KB";
    return chars + " characters";
  }

  function setUp(box) {
    var log = box.querySelector("#log");
    var followButton = box.querySelector("[data-log-follow]");
    var earlierRow = box.querySelector("[data-log-earlier-row]");
    var earlierButton = box.querySelector("[data-log-earlier]");
    var earlierChars = box.querySelector("[data-log-earlier-chars]");
    var findInput = box.querySelector("[data-log-find]");
    var findCount = box.querySelector("[data-log-find-count]");
    var following = true;
    var marks = [];
    var current = -1;

    function atEnd() {
      return log.scrollHeight - log.scrollTop - log.clientHeight <= NEAR_END_PX;
    }
    function show() {
      box.dataset.following = following ? "true" : "false";
      followButton.hidden = following;
    }
    function toEnd() {
      following = true;
      log.scrollTop = log.scrollHeight;
      show();
    }

    // The reader's own scrolling decides: at the end, follow; anywhere else, stay there.
    log.addEventListener("scroll", function () {
      following = atEnd();
      show();
    });
    // New output (htmx appends text to #log): keep the end in view while following.
    new MutationObserver(function () {
      if (following) log.scrollTop = log.scrollHeight;
    }).observe(log, { childList: true, characterData: true, subtree: true });

    followButton.addEventListener("click", toEnd);
    box.querySelector("[data-log-end]").addEventListener("click", toEnd);

    earlierButton.addEventListener("click", function () {
      var start = Number(log.dataset.start);
      earlierButton.disabled = true;
      fetch(box.dataset.earlierUrl + "?before=" + start, { headers: { Accept: "text/plain" }, credentials: "same-origin" })
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.text().then(function (text) {
            var newStart = Number(response.headers.get("X-Log-Start"));
            var height = log.scrollHeight;
            var top = log.scrollTop;
            var wasFollowing = following;
            following = false; // the observer must not jump to the end for text put in front
            log.insertBefore(document.createTextNode(text), log.firstChild);
            log.scrollTop = top + (log.scrollHeight - height); // what the reader looked at stays where it was
            following = wasFollowing && atEnd();
            show();
            log.dataset.start = String(newStart);
            earlierChars.textContent = size(newStart);
            earlierRow.hidden = newStart <= 0;
          });
        })
        .catch(function (error) {
          earlierChars.textContent = "could not load (" + error.message + "); try again";
        })
        .finally(function () {
          earlierButton.disabled = false;
        });
    });

    function unmark() {
      if (marks.length) log.textContent = log.textContent; // back to plain text, marks gone
      marks = [];
      current = -1;
    }
    function escape(text) {
      return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    }
    function find() {
      var wanted = findInput.value;
      unmark();
      if (!wanted) {
        findCount.textContent = "";
        return;
      }
      var text = log.textContent;
      var pattern = new RegExp(escape(wanted), "gi");
      var fragment = document.createDocumentFragment();
      var at = 0;
      var found = 0;
      var match;
      while ((match = pattern.exec(text)) !== null) {
        found += 1;
        if (found > MAX_MARKS) continue;
        fragment.appendChild(document.createTextNode(text.slice(at, match.index)));
        var mark = document.createElement("mark");
        mark.textContent = match[0];
        fragment.appendChild(mark);
        marks.push(mark);
        at = match.index + match[0].length;
      }
      if (!found) {
        findCount.textContent = "no match";
        return;
      }
      fragment.appendChild(document.createTextNode(text.slice(at)));
      following = false; // the reader is looking at a match, not the end
      log.replaceChildren(fragment);
      findCount.dataset.total = String(found);
      step(0);
    }
    function step(by) {
      if (!marks.length) return;
      if (current >= 0) marks[current].classList.remove("current");
      current = (current + by + marks.length) % marks.length;
      var mark = marks[current];
      mark.classList.add("current");
      following = false;
      log.scrollTop = Math.max(0, mark.offsetTop - log.clientHeight / 2);
      show();
      var total = Number(findCount.dataset.total);
      findCount.textContent = current + 1 + " of " + total + (total > marks.length ? " (first " + marks.length + " marked)" : "");
    }

    var typing;
    findInput.addEventListener("input", function () {
      clearTimeout(typing);
      typing = setTimeout(find, 250);
    });
    findInput.addEventListener("keydown", function (event) {
      if (event.key !== "Enter") return;
      event.preventDefault();
      clearTimeout(typing);
      if (!marks.length) find();
      else step(event.shiftKey ? -1 : 1);
    });
    box.querySelector("[data-log-find-next]").addEventListener("click", function () {
      if (!marks.length) find();
      else step(1);
    });
    box.querySelector("[data-log-find-prev]").addEventListener("click", function () {
      if (!marks.length) find();
      else step(-1);
    });

    toEnd(); // a log opens at its end: where a running job is, and where the error that ended it is
  }

  function start() {
    document.querySelectorAll("[data-log-box]").forEach(setUp);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
