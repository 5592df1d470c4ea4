"""The Python examples of docs/clients.md, run against a real cosid server by
tests/cluster/test_clients.py, which makes the assertions on what this prints:

    python3 python_examples.py <client> <port> <blocks.json> <work folder>

<client> is one of sqlalchemy, django, django_convert_before then django_convert (two processes,
as a model changes between two deployments), json; blocks.json maps the names of the document's marked
blocks to their code. Each client uses a database of its own, named after it (Django's without
the extension: its first migration creates it). Prints one JSON object: what was measured. Runs
with target/clients/python on PYTHONPATH (scripts/setup.sh installs the clients there).
"""

import io
import json
import sys
from pathlib import Path


def table_ids(connection, table):
    """What the table holds: its ids as decimal strings."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id::text FROM {table} ORDER BY id")
        return [row[0] for row in cursor.fetchall()]


def sqlalchemy_example(port, blocks, work):
    from sqlalchemy import (BigInteger, Column, MetaData, String, Table, create_engine, event,
                            text)
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.orm import Session
    from sqlalchemy.schema import CreateTable

    model = {}
    exec(blocks["sqlalchemy"], model)
    Base, Order = model["Base"], model["Order"]
    engine = create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{port}/sqlalchemy")
    ddl = []
    inserts = []

    @event.listens_for(engine, "before_cursor_execute")
    def record(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("CREATE TABLE"):
            ddl.append(" ".join(statement.split()))
        if statement.lstrip().upper().startswith("INSERT"):
            inserts.append(statement)

    Base.metadata.create_all(engine)
    out = {"create_table": ddl}
    # What the document says of the other declarations.
    variants = {}
    for name, column in {
        "autoincrement": Column("id", BigInteger, primary_key=True,
                                server_default=text("cosid_next()"), autoincrement=True),
        "no_server_default": Column("id", BigInteger, primary_key=True),
    }.items():
        table = Table("t", MetaData(), column, Column("item", String))
        variants[name] = " ".join(str(CreateTable(table).compile(
            dialect=postgresql.dialect())).split())
    out["variants"] = variants

    with Session(engine) as session:
        orders = [Order(item=f"o{n}") for n in range(100)]
        inserts.clear()
        session.add_all(orders)
        session.flush()
        out["unit_of_work_statements"] = len(inserts)
        ids = [order.id for order in orders]
        out["types"] = sorted({type(i).__name__ for i in ids})
        session.commit()
        # The document's bulk insert.
        inserts.clear()
        scope = {"session": session, "insert": __import__("sqlalchemy").insert, "Order": Order}
        exec(blocks["sqlalchemy_insert"], scope)
        session.commit()
        ids += scope["ids"]
        out["insert_statements"] = len(inserts)
        out["insert_ids"] = len(scope["ids"])
        # In batches of 1,000: 2,500 rows.
        inserts.clear()
        many = session.scalars(__import__("sqlalchemy").insert(Order).returning(Order.id),
                               [{"item": f"m{n}"} for n in range(2500)]).all()
        session.commit()
        ids += many
        out["insert_2500_statements"] = len(inserts)
        out["returned"] = [str(i) for i in ids]
    with engine.connect() as connection:
        raw = connection.connection.dbapi_connection
        out["table"] = table_ids(raw, "orders")
    engine.dispose()
    return out


def django_example(port, blocks, work):
    """An app, shop, whose models.py is the document's model (with a Line that refers to an
    order, for the pitfall), and whose first migration is the document's CreateExtension; the
    migration of the tables is made by makemigrations, as an application does."""
    app = Path(work) / "shop"
    (app / "migrations").mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "migrations" / "__init__.py").write_text("")
    (app / "models.py").write_text(
        blocks["django"]
        + "\n\nclass Line(models.Model):\n"
        + "    id = models.BigIntegerField(primary_key=True, "
        + "db_default=Func(function=\"cosid_next\"))\n"
        + "    order = models.ForeignKey(Order, on_delete=models.CASCADE)\n")
    (app / "migrations" / "0001_initial.py").write_text(blocks["django_migration"])
    call_command, connection = django_app(port, work, "django")
    from django.db import IntegrityError, transaction
    from shop.models import Line, Order

    quiet = io.StringIO()
    call_command("makemigrations", "shop", stdout=quiet)
    migrations = sorted(p.name for p in (app / "migrations").glob("0*.py"))
    sql = io.StringIO()
    call_command("sqlmigrate", "shop", migrations[-1].split("_")[0], stdout=sql)
    out = {"migrations": migrations, "sqlmigrate": sql.getvalue()}
    call_command("migrate", "shop", stdout=quiet)
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'cosid'")
        out["extension"] = cursor.fetchone() is not None
        cursor.execute("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef "
                       "WHERE adrelid = 'shop_order'::regclass")
        out["column_default"] = cursor.fetchone()[0]

    saved = Order(item="saved")
    saved.save()
    created = Order.objects.create(item="created")
    ids = [saved.pk, created.pk]
    out["types"] = sorted({type(i).__name__ for i in ids})
    out["returned"] = [str(i) for i in ids]
    out["table"] = table_ids(connection, "shop_order")

    bulk = Order.objects.bulk_create([Order(item="b1"), Order(item="b2")])
    out["bulk_pk_type"] = type(bulk[0].pk).__name__
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM shop_order")
        before = cursor.fetchone()[0]
        bulk[0].item = "b1 changed"
        bulk[0].save()
        cursor.execute("SELECT count(*) FROM shop_order")
        out["rows_added_by_save_after_bulk"] = cursor.fetchone()[0] - before
        cursor.execute("SELECT count(*) FROM shop_order WHERE item LIKE 'b1%'")
        out["b1_rows"] = cursor.fetchone()[0]
    try:
        with transaction.atomic():
            Line.objects.create(order=Order.objects.bulk_create([Order(item="b3")])[0])
        out["line_of_bulk_created"] = "created"
    except IntegrityError as error:
        out["line_of_bulk_created"] = f"IntegrityError: {error}".splitlines()[0]
    return out


def django_convert_example(port, blocks, work):
    """A Django app whose Customer was made with BigAutoField keys and has rows, moved to cosid
    by the document's migration: the first process (`django_convert_before`) makes and runs
    the app's first migration and inserts three rows; this one gives the model the document's
    field, adds the document's migration, and checks that makemigrations finds nothing to do,
    then migrates and inserts."""
    app = Path(work) / "shop"
    model = blocks["django"].replace("class Order(models.Model):", "class Customer(models.Model):")
    (app / "models.py").write_text(model)
    (app / "migrations" / "0002_cosid.py").write_text(blocks["django_convert"])
    call_command, connection = django_app(port, work, "django_convert")
    from shop.models import Customer

    out = {}
    planned = io.StringIO()
    try:
        call_command("makemigrations", "shop", "--check", "--dry-run", "--verbosity", "3",
                     stdout=planned)
        out["makemigrations"] = "no changes"
    except SystemExit as exit:
        out["makemigrations"] = f"changes ({exit.code}): {planned.getvalue()}"
    call_command("migrate", "shop", stdout=io.StringIO())
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_expr(d.adbin, d.adrelid), a.attidentity "
                       "FROM pg_attribute a LEFT JOIN pg_attrdef d "
                       "ON (d.adrelid, d.adnum) = (a.attrelid, a.attnum) "
                       "WHERE a.attrelid = 'shop_customer'::regclass AND a.attname = 'id'")
        out["column_default"], out["identity"] = cursor.fetchone()
    created = Customer.objects.create(item="after")
    out["new_id"] = str(created.pk)
    out["table"] = table_ids(connection, "shop_customer")
    return out


def django_convert_before(port, blocks, work):
    """The first process of `django_convert`: the app as it was, with BigAutoField keys."""
    app = Path(work) / "shop"
    (app / "migrations").mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "migrations" / "__init__.py").write_text("")
    (app / "models.py").write_text(
        "from django.db import models\n\n\nclass Customer(models.Model):\n"
        "    item = models.TextField()\n")
    call_command, connection = django_app(port, work, "django_convert")
    from shop.models import Customer
    call_command("makemigrations", "shop", stdout=io.StringIO())
    call_command("migrate", "shop", stdout=io.StringIO())
    for item in ("a", "b", "c"):
        Customer.objects.create(item=item)
    return {"migrations": sorted(p.name for p in (app / "migrations").glob("0*.py")),
            "table": table_ids(connection, "shop_customer")}


def django_app(port, work, database):
    """Django set up with the app shop of `work` on `database`; its call_command and
    connection."""
    sys.path.insert(0, str(work))
    import django
    from django.conf import settings
    settings.configure(
        INSTALLED_APPS=["django.contrib.postgres", "shop"],
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "HOST": "127.0.0.1",
                               "PORT": str(port), "USER": "postgres", "NAME": database}},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField", USE_TZ=True)
    django.setup()
    from django.core.management import call_command
    from django.db import connection
    return call_command, connection


def json_example(port, blocks, work):
    """An id from psycopg, written by json.dumps."""
    import psycopg
    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=json") as db:
        row = db.execute("SELECT id, id::text FROM (SELECT cosid_next() AS id) n").fetchone()
        return {"type": type(row[0]).__name__, "id": row[1],
                "json": json.dumps({"id": row[0]}), "str_json": json.dumps({"id": str(row[0])})}


if __name__ == "__main__":
    client, port, blocks_file, work = sys.argv[1:5]
    blocks = json.loads(Path(blocks_file).read_text())
    result = {"sqlalchemy": sqlalchemy_example, "django": django_example,
              "django_convert_before": django_convert_before,
              "django_convert": django_convert_example,
              "json": json_example}[client](int(port), blocks, work)
    print(json.dumps(result))
