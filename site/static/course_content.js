// The copy buttons (sphinx-copybutton) carry only a tooltip: give each an accessible name, so a
// screen reader says what it does. The buttons are added after the page loads, so this watches for them.
(function () {
  function name(root) {
    for (const button of root.querySelectorAll('button.copybtn:not([aria-label])')) {
      button.setAttribute('aria-label', 'Copy this code');
      if (!button.title) { button.title = 'Copy this code'; }
    }
  }
  function start() {
    name(document);
    new MutationObserver(() => name(document)).observe(document.body, {childList: true, subtree: true});
  }
  if (document.readyState === 'loading') { document.addEventListener('DOMContentLoaded', start); } else { start(); }
})();
