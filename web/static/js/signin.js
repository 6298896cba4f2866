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
  const refuse = () => {
    msg.replaceChildren(h('div', { class: 'alert', role: 'alert' }, 'That is not a valid, unexpired token. Code: ', h('code', {}, 'unauthenticated')));
  };
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
        if (!claimsOf(t)) {
          refuse();
          return;
        }
        // The app only reads the token's claims; the server checks its
        // signature. One cheap call every role may make, with the new token,
        // asks it before the sign-in is kept (stored) and announced.
        button.disabled = true;
        try {
          await api('GET', '/bookings?limit=1', { bearer: t });
        } catch (err) {
          if (err.status === 401) refuse();
          else msg.replaceChildren(errorBox(err));
          return;
        } finally {
          button.disabled = false;
        }
        setToken(t);
        page.navigate('/app/');
      },
    }, field('Bearer token', input), button),
    msg,
  );
}
