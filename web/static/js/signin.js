// Sign-in: outside `berth dev`, the operator's identity provider hands the
// app a bearer token (docs/webapp.md); a person may also paste one here.
import { api, setToken, claimsOf } from './api.js';
import { h, field, errorBox } from './ui.js';

export function signinPage(page) {
  page.title('Sign in');
  const input = h('textarea', { rows: 4, required: true, autocomplete: 'off', spellcheck: false });
  const msg = h('div');
  const button = h('button', { type: 'submit' }, 'Sign in');
  // A token refused leaves the session as it was: the stored token is only
  // replaced once the server has accepted the new one.
  page.main.append(
    h('h1', {}, 'Sign in'),
    h('p', {}, 'berth takes a bearer token from your organisation\'s sign-in service. In a development set-up, ',
      h('a', { href: '/dev/login' }, 'the development sign-in page'), ' signs you in as a demo user.'),
    h('form', {
      class: 'stack narrow',
      onsubmit: async (e) => {
        e.preventDefault();
        msg.replaceChildren();
        const t = input.value.trim();
        button.disabled = true;
        const refused = await checkToken(t);
        button.disabled = false;
        if (refused) {
          msg.replaceChildren(refused.alert);
          return;
        }
        setToken(t);
        page.navigate(backTo(page.url.searchParams.get('next')));
      },
    }, field('Bearer token', input), button),
    msg,
  );
}

// backTo is where to go once signed in: next, when it is a page of this
// app on this origin (its path and query only: never another site, as
// "//evil.example" or "https://evil.example" would be), else /app/.
export function backTo(next) {
  if (!next || !next.startsWith('/') || next.startsWith('//') || next.includes('\\')) return '/app/';
  let u;
  try {
    u = new URL(next, location.origin);
  } catch {
    return '/app/';
  }
  if (u.origin !== location.origin || !u.pathname.startsWith('/app/') || u.pathname.startsWith('/app/signin')) return '/app/';
  return u.pathname + u.search;
}

// checkToken asks the server whether it takes the bearer token t, before
// anything keeps it: null when it does, else {alert, final}: the alert to
// show, and whether the answer is final (the token is refused) or only
// for now (rate_limited, overloaded, a network error: asking again may
// take it). The app itself only reads a token's claims; the server checks
// its signature, so one cheap call every role may make, with t, decides.
export async function checkToken(t) {
  const refused = () => ({
    alert: h('div', { class: 'alert', role: 'alert' }, 'That is not a valid, unexpired token. Code: ', h('code', {}, 'unauthenticated')),
    final: true,
  });
  if (!claimsOf(t)) return refused();
  try {
    await api('GET', '/bookings?limit=1', { bearer: t });
    return null;
  } catch (err) {
    return err.status === 401 ? refused() : { alert: errorBox(err), final: false };
  }
}
