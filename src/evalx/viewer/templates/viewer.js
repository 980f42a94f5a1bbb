// evalx view and the static history page: filtering rows in the page (text only: nothing is built from data)
document.querySelectorAll('input[data-filter]').forEach(function (box) {
  var rows = document.querySelectorAll(box.getAttribute('data-filter'));
  box.addEventListener('input', function () {
    var q = box.value.toLowerCase();
    rows.forEach(function (r) { r.hidden = q && r.textContent.toLowerCase().indexOf(q) < 0; });
  });
});
document.querySelectorAll('#case-filters a[data-flag]').forEach(function (a) {
  a.addEventListener('click', function (ev) {
    ev.preventDefault();
    var flag = a.getAttribute('data-flag');
    document.querySelectorAll('#case-filters a').forEach(function (x) { x.classList.toggle('on', x === a); });
    document.querySelectorAll('#cases tbody tr').forEach(function (r) {
      r.hidden = flag !== 'all' && (' ' + r.getAttribute('data-flags') + ' ').indexOf(' ' + flag + ' ') < 0;
    });
  });
});
