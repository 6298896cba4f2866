// Sign-in: outside `berth dev`, the operator's identity provider hands the
// app a bearer token (docs/webapp.md); a person may also paste one here.
import { setToken, claims } from './api.js';
import { h, field } from './ui.js';

export function signinPage(page) {
  page.title('Sign in');
  const input = h('textarea', { rows: 4, required: true, autocomplete: 'off', spellcheck: false });
  const msg = h('div');
  page.main.append(
    h('h1', {}, 'Sign in'),
    h('p', {}, 'berth takes a bearer token from your organisation\'s sign-in service. In a development set-up, ',
      h('a', { href: '/dev/login' }, 'the development sign-in page'), ' signs you in as a demo user.'),
    h('form', {
      class: 'stack narrow',
      onsubmit: (e) => {
        e.preventDefault();
        setToken(input.value.trim());
        if (!claims()) {
          setToken('');
          msg.replaceChildren(h('div', { class: 'alert', role: 'alert' }, 'That is not a valid, unexpired token. Code: ', h('code', {}, 'unauthenticated')));
          return;
        }
        page.navigate('/app/');
      },
    }, field('Bearer token', input), h('button', { type: 'submit' }, 'Sign in')),
    msg,
  );
}
