// The app shell: reads the path, shows the page it names, and keeps
// navigation inside the app (links under /app/ never reload the page).
import { claims, setToken } from './api.js';
import { h, errorBox, setPageZone, signinHref } from './ui.js';
import { searchPage, flightPage } from './flights.js';
import { bookingPage, bookingsPage } from './bookings.js';
import { carsPage, carPage } from './cars.js';
import { hostPage } from './host.js';
import { adminPage } from './admin.js';
import { signinPage, checkToken } from './signin.js';

const routes = [
  [/^\/(?:app\/?)?$/, searchPage],
  [/^\/app\/flights\/?$/, searchPage],
  [/^\/app\/flights\/(\d+)\/?$/, flightPage],
  [/^\/app\/bookings\/?$/, bookingsPage],
  [/^\/app\/bookings\/(\d+)\/?$/, bookingPage],
  [/^\/app\/cars\/?$/, carsPage],
  [/^\/app\/cars\/(\d+)\/?$/, carPage],
  [/^\/app\/host\/?$/, hostPage],
  [/^\/app\/admin\/?$/, adminPage],
  [/^\/app\/signin\/?$/, signinPage],
];

let current = null;

// Page is what a page renders into, and what it must undo when left.
class Page {
  constructor(main) {
    this.main = main;
    this.url = new URL(location.href);
    this.done = [];
    this.left = false;
  }
  cleanup(f) { this.done.push(f); }
  leave() { this.left = true; this.done.forEach((f) => f()); }
  title(t) { document.title = `${t} · berth`; }
  navigate(url, replace = false) { navigate(url, replace); }
}

function render() {
  current?.leave();
  const main = document.getElementById('main');
  main.replaceChildren();
  const page = new Page(main);
  current = page;
  setPageZone('');
  showWho();
  markNav();
  const path = location.pathname;
  for (const [re, f] of routes) {
    const m = re.exec(path);
    if (m) {
      Promise.resolve(f(page, ...m.slice(1))).catch((err) => {
        if (page.left) return;
        // A page that failed before its heading still gets one.
        if (!main.querySelector('h1')) {
          const what = err.code === 'not_found' ? 'Not found' : 'Something went wrong';
          page.title(what);
          main.prepend(h('h1', {}, what));
        }
        main.append(errorBox(err));
      });
      return;
    }
  }
  page.title('Not found');
  main.append(h('h1', {}, 'Page not found'), h('p', {}, h('a', { href: '/app/' }, 'Search flights')));
}

export function navigate(url, replace = false) {
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  render();
  document.getElementById('main').focus({ preventScroll: false });
}

function showWho() {
  const who = document.getElementById('who');
  const c = claims();
  document.body.classList.remove('role-customer', 'role-host', 'role-admin');
  // The Host and Admin links are for callers whose token has that role
  // (an admin may use the host's page too); nobody else sees them.
  for (const li of document.querySelectorAll('.top .for-host')) li.hidden = !(c && (c.role === 'host' || c.role === 'admin'));
  for (const li of document.querySelectorAll('.top .for-admin')) li.hidden = !(c && c.role === 'admin');
  if (!c) {
    who.replaceChildren(h('a', { href: signinHref() }, 'Sign in'));
    return;
  }
  document.body.classList.add(`role-${c.role}`);
  who.replaceChildren(`Signed in as ${c.role} ${c.sub}`,
    h('button', { type: 'button', class: 'secondary', onclick: () => { setToken(''); navigate('/app/signin'); } }, 'Sign out'));
}

function markNav() {
  for (const a of document.querySelectorAll('.top nav a')) {
    const p = a.getAttribute('href');
    const here = p === '/app/' ? /^\/(app\/?)?$|^\/app\/flights/.test(location.pathname) : location.pathname.startsWith(p);
    if (here) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

// A token handed over in the URL's fragment (#access_token=…, as an
// identity provider's redirect gives it) is kept once the server has
// accepted it, and removed from the URL; one it refuses is removed too and
// leaves the session as it was. When the server could not say (busy, or
// not reached), the fragment stays, so that a reload asks again. Returns
// the alert to show, or null.
async function takeFragmentToken() {
  const m = /(?:^|&)access_token=([^&]+)/.exec(location.hash.slice(1));
  if (!m) return null;
  let t;
  try {
    t = decodeURIComponent(m[1]);
  } catch {
    t = '';
  }
  const refused = await checkToken(t);
  if (!refused) setToken(t);
  if (!refused || refused.final) {
    history.replaceState(null, '', location.pathname + location.search);
    return refused?.alert || null;
  }
  return h('div', {}, refused.alert, h('p', {}, 'Your sign-in could not be checked just now. ',
    h('button', { type: 'button', onclick: () => location.reload() }, 'Try again')));
}

// start renders the page, once a token in the fragment has been dealt with.
function start() {
  takeFragmentToken().then((alert) => {
    render();
    if (alert) document.getElementById('main').prepend(alert);
  });
}

document.addEventListener('click', (e) => {
  const a = e.target.closest('a');
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || a.target) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !(url.pathname === '/' || url.pathname.startsWith('/app/') || url.pathname === '/app')) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
});
window.addEventListener('popstate', render);
// A sign-in redirect to the page already open changes only the fragment.
window.addEventListener('hashchange', () => {
  if (/(?:^|&)access_token=/.test(location.hash.slice(1))) start();
});
start();
