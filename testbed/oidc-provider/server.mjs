// A real OpenID Provider for Rackplane's sign-in tests: panva's certified `oidc-provider` (pinned by
// package-lock.json), with a plain login page and the users, groups and clients of one JSON file.
//
//   node server.mjs --issuer http://127.0.0.1:PORT --port PORT --config provider.json --keys jwks.json
//
// provider.json (re-read at every use, so a test changes users, passwords, groups or a client's redirect URIs
// by rewriting it; no restart needed):
//   {"clients": [{"client_id": "...", "client_secret": "...", "redirect_uris": ["http://.../oidc/callback/"]}],
//    "accounts": {"alice": {"sub": "...", "password": "...", "email": "...", "name": "...",
//                           "given_name": "...", "family_name": "...", "groups": ["..."],
//                           "posix_username": "...", "uid_number": N, "gid_number": N, "posix_groups": [N]}}}
// An account's `sub` defaults to its username. jwks.json holds the RS256 signing key (made on the first
// start, kept across restarts). Everything else (sessions, codes, tokens, grants) lives in memory.
//
// The provider is configured as a real deployment would be: the authorization code flow with PKCE required,
// client_secret_basic, the `groups` claim released with the `groups` scope (userinfo; the ID token carries
// only what OpenID Connect puts there), and a login page that checks passwords. Consent is given by the
// operator for these first-party clients, so after the login page the browser goes straight back.

import { createHash, generateKeyPairSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';
import MemoryAdapter from 'oidc-provider/lib/adapters/memory_adapter.js';

const { values: args } = parseArgs({
  options: {
    issuer: { type: 'string' },
    port: { type: 'string' },
    config: { type: 'string' },
    keys: { type: 'string' },
  },
});
for (const name of ['issuer', 'port', 'config', 'keys']) {
  if (!args[name]) {
    console.error(`missing --${name}`);
    process.exit(2);
  }
}

function readConfig() {
  const config = JSON.parse(readFileSync(args.config, 'utf8'));
  return { clients: config.clients ?? [], accounts: config.accounts ?? {} };
}

function signingKeys() {
  if (!existsSync(args.keys)) {
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const jwk = { ...privateKey.export({ format: 'jwk' }), alg: 'RS256', use: 'sig', kid: randomBytes(8).toString('hex') };
    writeFileSync(args.keys, JSON.stringify({ keys: [jwk] }), { mode: 0o600 });
  }
  return JSON.parse(readFileSync(args.keys, 'utf8')).keys;
}

function accountByUsername(username) {
  const { accounts } = readConfig();
  return Object.hasOwn(accounts, username) ? { username, ...accounts[username] } : undefined;
}

function accountBySub(sub) {
  const { accounts } = readConfig();
  for (const [username, account] of Object.entries(accounts)) {
    if ((account.sub ?? username) === sub) return { username, ...account };
  }
  return undefined;
}

function samePassword(given, expected) {
  const a = createHash('sha256').update(String(given)).digest();
  const b = createHash('sha256').update(String(expected)).digest();
  return timingSafeEqual(a, b);
}

// Clients come from the config file (tests register the live server's callback URL there); the rest of the
// provider's state from oidc-provider's own in-memory adapter.
class ConfigClients {
  async find(id) {
    const client = readConfig().clients.find((candidate) => candidate.client_id === id);
    return client ? { ...client } : undefined;
  }
  async upsert() {}
  async destroy() {}
  async consume() {}
  async findByUid() {}
  async findByUserCode() {}
  async revokeByGrantId() {}
}

const clients = new ConfigClients();

const provider = new Provider(args.issuer, {
  adapter: (model) => (model === 'Client' ? clients : new MemoryAdapter(model)),
  clients: [],
  async findAccount(ctx, sub) {
    const account = accountBySub(sub);
    if (!account) return undefined;
    return {
      accountId: sub,
      async claims() {
        // The account as it is in the file now: a changed group shows at the next sign-in.
        const current = accountBySub(sub) ?? account;
        return {
          sub,
          preferred_username: current.username,
          name: current.name ?? current.username,
          given_name: current.given_name,
          family_name: current.family_name,
          email: current.email,
          email_verified: Boolean(current.email),
          groups: current.groups ?? [],
          // The Unix identity jobs run as (Rackplane's OIDC_POSIX_*_CLAIM), when the account has one.
          posix_username: current.posix_username,
          uid_number: current.uid_number,
          gid_number: current.gid_number,
          posix_groups: current.posix_groups,
        };
      },
    };
  },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    // The POSIX identity travels with the profile (a site's provider may use its own scope instead:
    // add it to OIDC_RP_SCOPES).
    profile: ['name', 'given_name', 'family_name', 'preferred_username', 'posix_username', 'uid_number', 'gid_number', 'posix_groups'],
    groups: ['groups'],
  },
  scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
  features: {
    devInteractions: { enabled: false },
    userinfo: { enabled: true },
    revocation: { enabled: true },
  },
  pkce: { required: () => true },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  jwks: { keys: signingKeys() },
  ttl: {
    AccessToken: 3600,
    AuthorizationCode: 120,
    IdToken: 3600,
    Interaction: 900,
    Session: 86400,
    Grant: 86400,
  },
});

function escape(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

function loginPage(uid, clientName, error, username = '') {
  return `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Test identity provider: sign in</title></head>
<body>
  <main>
    <h1>Test identity provider</h1>
    <p>Sign in to continue to ${escape(clientName)}.</p>
    ${error ? `<p role="alert" id="error">${escape(error)}</p>` : ''}
    <form method="post" action="/interaction/${escape(uid)}/login" autocomplete="off">
      <label for="username">Username</label>
      <input id="username" name="username" value="${escape(username)}" required autofocus>
      <label for="password">Password</label>
      <input id="password" name="password" type="password" required>
      <button type="submit" id="submit">Sign in</button>
    </form>
  </main>
</body>
</html>`;
}

async function formBody(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 16384) throw new Error('form too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

// The login page and the operator's consent, in front of the provider's own routes.
provider.use(async (ctx, next) => {
  const match = /^\/interaction\/([\w-]+)(\/login)?$/.exec(ctx.path);
  if (!match) return next();
  ctx.set('Cache-Control', 'no-store');
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  const { uid, prompt, params } = details;
  const client = await provider.Client.find(params.client_id);
  const clientName = client?.clientName ?? params.client_id;

  if (prompt.name === 'login') {
    if (ctx.method === 'GET' && !match[2]) {
      ctx.type = 'html';
      ctx.body = loginPage(uid, clientName);
      return undefined;
    }
    if (ctx.method === 'POST' && match[2]) {
      const form = await formBody(ctx.req);
      const username = form.get('username') ?? '';
      const account = accountByUsername(username);
      if (!account || !samePassword(form.get('password') ?? '', account.password ?? randomBytes(16))) {
        ctx.status = 401;
        ctx.type = 'html';
        ctx.body = loginPage(uid, clientName, 'Wrong username or password.', username);
        return undefined;
      }
      const returnTo = await provider.interactionResult(
        ctx.req,
        ctx.res,
        { login: { accountId: account.sub ?? account.username } },
        { mergeWithLastSubmission: false },
      );
      ctx.status = 303;
      ctx.redirect(returnTo);
      return undefined;
    }
  }

  if (prompt.name === 'consent') {
    const { missingOIDCScope, missingOIDCClaims, missingResourceScopes } = prompt.details;
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: details.session.accountId, clientId: params.client_id });
    if (missingOIDCScope) grant.addOIDCScope(missingOIDCScope.join(' '));
    if (missingOIDCClaims) grant.addOIDCClaims(missingOIDCClaims);
    for (const [indicator, scopes] of Object.entries(missingResourceScopes ?? {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    const grantId = await grant.save();
    const returnTo = await provider.interactionResult(
      ctx.req,
      ctx.res,
      { consent: { grantId } },
      { mergeWithLastSubmission: true },
    );
    ctx.status = 303;
    ctx.redirect(returnTo);
    return undefined;
  }

  ctx.status = 400;
  ctx.body = `unexpected interaction ${prompt.name}`;
  return undefined;
});

provider.on('server_error', (ctx, error) => console.error('server_error', error));

const server = provider.listen(Number(args.port), '127.0.0.1', () => {
  console.log(`oidc-provider ready: ${args.issuer}`);
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}
