// Installed alone, @ballast/nestjs cannot load: it imports @ballast/client,
// a peer packed beside it (an optional one, so that npm does not look for it
// in a registry it is not published to). Name the missing tarball here,
// rather than leave the first import to say "Cannot find package".
'use strict';

const { version } = require('./package.json');

try {
  require.resolve('@ballast/client/package.json');
} catch {
  const [major, minor] = version.split('.');
  console.error(
    `@ballast/nestjs ${version} needs @ballast/client ${major}.${minor}.x installed beside it, and it is not. ` +
      `Install both tarballs in one command: npm install ./ballast-client-${version}.tgz ./ballast-nestjs-${version}.tgz ` +
      '(npm pack --workspaces in clients/typescript makes both).',
  );
  process.exit(1);
}
