// Builds static/plotly-scatter-bar-heatmap-<version>.min.js from entry.js, as plotly.js builds its own bundles
// (esbuild, an iife that sets the global `Plotly`), minus what only WebGL and map traces need.
// Run here: `npm ci && npm run build`; the bundle is committed, so the app and CI need no Node.js.
import { build } from 'esbuild';
import { readFileSync } from 'node:fs';

const version = JSON.parse(readFileSync('node_modules/plotly.js/package.json', 'utf8')).version;
const outfile = `../../static/plotly-scatter-bar-heatmap-${version}.min.js`;

await build({
  entryPoints: ['entry.js'],
  outfile,
  format: 'iife',
  globalName: 'Plotly',
  bundle: true,
  minify: true,
  legalComments: 'eof',
  banner: {
    js: `/**\n* plotly.js (scatter, bar, heatmap - minified) v${version}\n* Copyright 2012-2026, Plotly, Inc.\n* All rights reserved.\n* Licensed under the MIT license\n*/`,
  },
  define: { global: 'window', 'define.amd': 'false', 'process.env.NODE_DEBUG': 'false' },
  loader: { '.css': 'empty' }, // maplibre's stylesheet, required by the registry for map traces only
  logLevel: 'info',
});
