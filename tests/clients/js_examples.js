// The JavaScript examples of docs/clients.md, run against a real cosid server by
// tests/cluster/test_clients.py, which makes the assertions on what this prints:
//
//     node js_examples.js <client> <port> <blocks.json> <work folder>
//
// <client> is one of javascript, sequelize, knex, drizzle, typeorm; blocks.json maps the names of
// the document's marked blocks to their code. Each client uses a database of its own, named after
// it, which the test has made with the extension. Prints one JSON object: what was measured.
'use strict';

const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const [client, port, blocksFile, work] = process.argv.slice(2);
const blocks = JSON.parse(fs.readFileSync(blocksFile, 'utf8'));
const url = `postgres://postgres@127.0.0.1:${port}/${client}`;
const AsyncFunction = (async () => {}).constructor;

// What the table holds: its ids as decimal strings, in order.
async function tableIds(table) {
  const { Client } = require('pg');
  const db = new Client(url);
  await db.connect();
  try {
    const { rows } = await db.query(`SELECT id::text AS id FROM ${table} ORDER BY id`);
    return rows.map((r) => r.id);
  } finally {
    await db.end();
  }
}

async function columnDefault(table, column = 'id') {
  const { Client } = require('pg');
  const db = new Client(url);
  await db.connect();
  try {
    const { rows } = await db.query(
      `SELECT column_default, data_type, is_identity FROM information_schema.columns
        WHERE table_name = $1 AND column_name = $2`, [table, column]);
    return rows[0] || null;
  } finally {
    await db.end();
  }
}

// Looks each id up again with `param(id)` as the parameter: how many found their own row,
// another row, none.
async function lookups(db, table, ids, param) {
  const found = { own: 0, another: 0, none: 0 };
  for (const id of ids) {
    const { rows } = await db.query(`SELECT id::text AS id FROM ${table} WHERE id = $1`,
      [param(id)]);
    if (rows.length === 0) found.none += 1;
    else if (rows[0].id === String(id)) found.own += 1;
    else found.another += 1;
  }
  return found;
}

function typesOf(values) {
  return [...new Set(values.map((v) => typeof v))];
}

const clients = {
  // The JavaScript section: node-postgres's strings, BigInt, Number, ids in json.
  async javascript() {
    const { Client } = require('pg');
    const db = new Client(url);
    await db.connect();
    const out = {};
    try {
      await db.query('CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT cosid_next(), item text)');
      const { rows } = await db.query(
        "INSERT INTO orders (item) SELECT 'i' || n FROM generate_series(1, 1000) n RETURNING id");
      const ids = rows.map((r) => r.id);
      out.types = typesOf(ids);
      out.returned = [...ids].sort();
      out.table = await tableIds('orders');
      out.through_number = await lookups(db, 'orders', ids, Number);
      out.through_bigint = await lookups(db, 'orders', ids, (id) => BigInt(id).toString());
      try {
        JSON.stringify({ id: BigInt(ids[0]) });
        out.bigint_json = 'no error';
      } catch (e) {
        out.bigint_json = `${e.name}: ${e.message}`;
      }
      out.bigint_json_replacer = JSON.stringify(
        { id: BigInt(ids[0]) }, (k, v) => (typeof v === 'bigint' ? String(v) : v));
      out.first_id = ids[0];
      const json = await db.query(
        "SELECT json_build_object('id', id) AS j, row_to_json(o) AS r, id::text AS id "
        + 'FROM orders o ORDER BY id LIMIT 100');
      out.json_exact = json.rows.filter((r) => String(r.j.id) === r.id).length;
      out.row_to_json_exact = json.rows.filter((r) => String(r.r.id) === r.id).length;
      // A safe_js generator's ids, as Number, with node-postgres's type parser for bigint.
      await db.query(
        "CREATE TABLE clicks (id bigint PRIMARY KEY DEFAULT cosid_next('web'), url text)");
      const clicks = await db.query(
        "INSERT INTO clicks (url) SELECT '/' || n FROM generate_series(1, 1000) n RETURNING id");
      out.safe_js_types = typesOf(clicks.rows.map((r) => r.id));
      const parsed = new Client({ connectionString: url, types: {
        getTypeParser: (oid, format) => (oid === 20 ? Number
          : require('pg').types.getTypeParser(oid, format)),
      } });
      await parsed.connect();
      const numbers = (await parsed.query('SELECT id FROM clicks')).rows.map((r) => r.id);
      out.safe_js_number_types = typesOf(numbers);
      out.safe_js_through_number = await lookups(parsed, 'clicks', numbers, (id) => id);
      out.safe_js_max_below_2_53 = numbers.every((n) => Number.isSafeInteger(n));
      await parsed.end();
    } finally {
      await db.end();
    }
    return out;
  },

  async sequelize() {
    const { Sequelize, DataTypes, literal } = require('sequelize');
    const statements = [];
    const sequelize = new Sequelize(url, { logging: (sql) => statements.push(sql) });
    const out = {};
    try {
      const Order = new Function('sequelize', 'DataTypes', 'literal',
        `${blocks.sequelize}\nreturn Order;`)(sequelize, DataTypes, literal);
      await sequelize.sync();
      out.create_table = statements.find((s) => /CREATE TABLE/.test(s));
      out.column = await columnDefault('Orders');
      const one = await Order.create({ item: 'a' });
      const many = await Order.bulkCreate([{ item: 'b' }, { item: 'c' }, { item: 'd' }]);
      const ids = [one.id, ...many.map((o) => o.id)];
      out.types = typesOf(ids);
      out.returned = ids.map(String).sort();
      out.table = await tableIds('"Orders"');
      // What the document warns of: autoIncrement, alone and with the default.
      const bigserial = sequelize.define('Serial', {
        id: { type: DataTypes.BIGINT, primaryKey: true, autoIncrement: true },
        item: DataTypes.TEXT,
      });
      statements.length = 0;
      await bigserial.sync();
      out.auto_increment_table = statements.find((s) => /CREATE TABLE/.test(s));
      const both = sequelize.define('Both', {
        id: { type: DataTypes.BIGINT, primaryKey: true, autoIncrement: true,
              defaultValue: literal('cosid_next()') },
        item: DataTypes.TEXT,
      });
      try {
        await both.sync();
        out.auto_increment_and_default = 'created';
      } catch (e) {
        out.auto_increment_and_default = e.message;
      }
    } finally {
      await sequelize.close();
    }
    return out;
  },

  async knex() {
    const knex = require('knex')({ client: 'pg', connection: url });
    const out = {};
    try {
      const inserted = await new AsyncFunction('knex', `${blocks.knex}\nreturn ids;`)(knex);
      const ids = inserted.map((r) => r.id);
      out.types = typesOf(ids);
      out.returned = [...ids].sort();
      out.table = await tableIds('orders');
      out.column = await columnDefault('orders');
      out.big_increments = knex.schema.createTable('t', (t) => { t.bigIncrements('id'); })
        .toString();
    } finally {
      await knex.destroy();
    }
    return out;
  },

  async drizzle() {
    const esbuild = require('esbuild');
    const { drizzle } = require('drizzle-orm/node-postgres');
    const { eq, sql } = require('drizzle-orm');
    const { pgTable, bigint, text } = require('drizzle-orm/pg-core');
    const out = {};
    // The document's schema, as drizzle-kit reads it (a .ts file) and as the application runs it.
    const schemaTs = path.join(work, 'schema.ts');
    fs.writeFileSync(schemaTs, blocks.drizzle);
    const schemaJs = path.join(work, 'schema.js');
    fs.writeFileSync(schemaJs, esbuild.transformSync(blocks.drizzle,
      { loader: 'ts', format: 'cjs' }).code);
    const kit = path.join(process.env.NODE_PATH, 'drizzle-kit', 'bin.cjs');
    const kitRun = (command, name, config) => {
      const file = path.join(work, `${name}.config.js`);
      fs.writeFileSync(file, `module.exports = ${JSON.stringify({
        dialect: 'postgresql', schema: schemaTs, out: path.join(work, 'migrations'),
        dbCredentials: { url }, ...config,
      })};\n`);
      const args = [kit, command, '--config', file];
      if (command === 'push') args.push('--force');
      try {
        const stdout = execFileSync(process.execPath, args,
          { cwd: work, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 120000 });
        return { status: 0, output: stdout };
      } catch (e) {
        return { status: e.status, output: `${e.stdout || ''}${e.stderr || ''}` };
      }
    };
    // push: without schemaFilter, then with it, then with the generator's argument as written
    // (without ::text), twice, then the document's again.
    out.push = kitRun('push', 'unfiltered', {});
    out.push_filtered = kitRun('push', 'filtered', { schemaFilter: ['public'] });
    const plain = path.join(work, 'plain.ts');
    fs.writeFileSync(plain, blocks.drizzle.replace(/'::text\)/g, "')"));
    out.plain_default_changed = blocks.drizzle !== fs.readFileSync(plain, 'utf8');
    out.push_plain = kitRun('push', 'plain', { schema: plain });
    out.push_plain_again = kitRun('push', 'plain', { schema: plain });
    out.push_again = kitRun('push', 'again', {});
    // migrate on a database without the extension, then with it.
    const bare = url.replace(/\/drizzle$/, '/drizzle_bare');
    out.generate = kitRun('generate', 'generate', {});
    out.migrate_bare = kitRun('migrate', 'bare', { dbCredentials: { url: bare } });
    const { Client } = require('pg');
    const admin = new Client(bare);
    await admin.connect();
    await admin.query('CREATE EXTENSION cosid');
    await admin.end();
    out.migrate_with_extension = kitRun('migrate', 'bare', { dbCredentials: { url: bare } });
    out.column = await columnDefault('invoices');

    const { Pool } = require('pg');
    const pool = new Pool({ connectionString: url });
    const db = drizzle(pool);
    try {
      const { invoices } = require(schemaJs);
      const rows = await db.insert(invoices)
        .values(Array.from({ length: 1000 }, (_, n) => ({ item: `i${n}` }))).returning();
      const ids = rows.map((r) => r.id);
      out.types = typesOf(ids);
      out.returned = [...ids].sort();
      out.table = await tableIds('invoices');
      out.custom_type_found = 0;
      for (const id of ids) {
        const found = await db.select().from(invoices).where(eq(invoices.id, id));
        if (found.length === 1 && found[0].item === rows.find((r) => r.id === id).item) {
          out.custom_type_found += 1;
        }
      }
      out.json = JSON.stringify(rows[0]);

      // The two modes of Drizzle's bigint, on a table of the default generator.
      await pool.query(
        'CREATE TABLE numbered (id bigint PRIMARY KEY DEFAULT cosid_next(), item text)');
      const modes = {};
      for (const mode of ['number', 'bigint']) {
        const numbered = pgTable('numbered', {
          id: bigint('id', { mode }).primaryKey().default(sql`cosid_next()`), item: text('item'),
        });
        const back = await db.insert(numbered)
          .values(Array.from({ length: 1000 }, (_, n) => ({ item: `${mode}${n}` }))).returning();
        // Each row looked up again by the id it was given: its own row (the same item), another
        // row, or none.
        const found = { own: 0, another: 0, none: 0 };
        for (const row of back) {
          const hit = await db.select().from(numbered).where(eq(numbered.id, row.id));
          if (hit.length === 0) found.none += 1;
          else if (hit[0].item === row.item) found.own += 1;
          else found.another += 1;
        }
        let json;
        try {
          json = JSON.stringify(back[0]);
        } catch (e) {
          json = `${e.name}: ${e.message}`;
        }
        modes[mode] = { found, types: typesOf(back.map((r) => r.id)), json };
      }
      out.modes = modes;
    } finally {
      await pool.end();
    }
    return out;
  },

  async typeorm() {
    const { DataSource, EntitySchema } = require('typeorm');
    const queries = [];
    const logger = {
      logQuery: (query, parameters) => queries.push(query),
      logQueryError() {}, logQuerySlow() {}, logSchemaBuild() {}, logMigration() {}, log() {},
    };
    const Order = new Function('EntitySchema', `${blocks.typeorm}\nreturn Order;`)(EntitySchema);
    const options = { type: 'postgres', url, entities: [Order], logger, logging: true };
    const out = {};
    const first = new DataSource({ ...options, synchronize: true });
    await first.initialize();
    try {
      out.create_table = queries.find((q) => /CREATE TABLE/.test(q));
      out.column = await columnDefault('orders');
      const repo = first.getRepository(Order);
      queries.length = 0;
      const one = await repo.save({ item: 'a' });
      const many = await repo.save([{ item: 'b' }, { item: 'c' }]);
      const inserted = await repo.insert([{ item: 'd' }, { item: 'e' }]);
      out.inserts = queries.filter((q) => /^INSERT/.test(q));
      const ids = [one.id, ...many.map((o) => o.id), ...inserted.identifiers.map((i) => i.id)];
      out.types = typesOf(ids);
      out.returned = ids.map(String).sort();
      out.table = await tableIds('orders');
    } finally {
      await first.destroy();
    }
    // A second synchronize: what it would change.
    const second = new DataSource(options);
    await second.initialize();
    try {
      const pending = await second.driver.createSchemaBuilder().log();
      out.second_synchronize = pending.upQueries.map((q) => q.query);
    } finally {
      await second.destroy();
    }
    return out;
  },
};

clients[client]().then((out) => {
  process.stdout.write(`${JSON.stringify(out)}\n`);
}, (error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
