// The web view's entry: the login, then a page by the address's fragment (#/ the list, #/s/<id>[/<tab>] a
// sandbox), and a way out.

import { el, forget, get, key, login, loginSandbox, logout, toast, whenLoggedOut } from './api.js';
import { renderList } from './list.js';
import { renderSandbox } from './sandbox.js';

const main = document.getElementById('main');
const who = document.getElementById('who');
let close = () => {};

function loginPage(why) {
  close();
  close = () => {};
  who.replaceChildren();
  const token = el('input', { id: 'token', type: 'password', placeholder: 'berth_…', size: 48, autocomplete: 'off' });
  const go = el('button', { text: 'Log in', id: 'login' });
  const form = el('form', { class: 'login' },
    el('h2', { text: 'Log in' }),
    el('p', { text: 'With an API token (berth token create) or a sandbox\'s session token (its BERTH_TOKEN), which sees that sandbox and its children only.' }),
    why ? el('p', { class: 'error', id: 'login-error', text: why }) : '',
    token, go);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    go.disabled = true;
    try {
      const answer = await login(token.value.trim());
      location.hash = answer.sandbox ? `#/s/${answer.sandbox}` : '#/';
      route();
    } catch (err) {
      loginPage(err.message);
    } finally {
      go.disabled = false;
    }
  });
  main.replaceChildren(form);
  token.focus();
}

async function header() {
  const out = el('button', { text: 'Log out', id: 'logout', onclick: async () => {
    await logout();
    loginPage();
  } });
  const scope = loginSandbox();
  who.replaceChildren(el('span', { class: 'muted', text: scope ? `session of ${scope}` : 'API token' }), out);
  try {
    const info = await get('/v1/info');
    document.getElementById('version').textContent = `berth ${info.version}`;
  } catch (_) {
    // The page says what failed where it matters.
  }
}

function route() {
  if (!key()) return loginPage();
  close();
  header();
  const parts = location.hash.replace(/^#\/?/, '').split('/');
  if (parts[0] === 's' && parts[1]) close = renderSandbox(main, decodeURIComponent(parts[1]), parts[2]);
  else close = renderList(main);
  return undefined;
}

whenLoggedOut((err) => {
  if (!key()) return;
  // A session token's login gets 401s for what it may not see; an ended login is said once, then the login.
  if (/log in again/.test(err.message)) {
    forget();
    loginPage(err.message);
  } else {
    toast(err.message, 'error');
  }
});
window.addEventListener('hashchange', route);
if (window.opener) {
  // A window another page opened is one that page can read: a path-form preview is on this origin, and would
  // see the token typed here. The login is only offered in a tab of its own.
  main.replaceChildren(el('p', { class: 'error', id: 'opened', text: 'This page was opened by another page. Open berth in a tab of its own (type its address) to log in.' }));
} else {
  route();
}
