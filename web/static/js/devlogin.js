// The development sign-in page (/dev/login, `berth dev` only) hands over
// a token in a meta tag: keep it where the app looks for it, and go on.
const tok = document.querySelector('meta[name="berth-token"]')?.content;
const next = document.querySelector('meta[name="berth-next"]')?.content || '/app/';
if (tok) {
  sessionStorage.setItem('berth.token', tok);
  location.replace(next);
}
